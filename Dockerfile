# syntax=docker/dockerfile:1.4
# The stitchd container image: Debian bookworm, the daemon and stitchctl, and only the shared
# libraries they load. deploy/k8s/ runs it as a DaemonSet.
#
#   docker build -t stitchd:0.1.0 .
#
# builds in PTX-only mode (no CUDA toolkit: kernels are served as PTX, and math uses the
# compiler's own routines). To assemble cubin with nvJitLink or ptxas and use libdevice, name
# an image that holds the CUDA toolkit in /usr/local/cuda; its ptxas, nvJitLink and libdevice
# are copied into the build and the runtime image (the toolkit's licence applies to them):
#
#   docker build --build-arg CUDA_IMAGE=nvidia/cuda:12.4.1-devel-ubuntu22.04 -t stitchd:0.1.0-cuda .
#
# BuildKit (the default builder since Docker 23) is required: the build uses a cache mount for
# ccache and a heredoc. The builder runs scripts/setup and scripts/build, as CI does, without the
# tests and benchmarks (STITCH_CMAKE_ARGS); the runtime stage installs the Debian packages
# that own the libraries `ldd` lists for the binaries, so the image gets security updates
# through apt like any other, and it checks that nothing else is needed.
#
#   docker run --rm -p 127.0.0.1:7070:7070 -p 9464:9464 stitchd:0.1.0
#
# serves on the default ports with the cache in /var/lib/stitchd and the socket in /run/stitchd
# (mount volumes there to keep or share them). The default command listens on 0.0.0.0:7070
# inside the container (stitchd's own default is loopback, which no -p reaches); only an
# explicit -p publishes it, and without TLS it is plaintext: publish it on loopback as above,
# or serve mutual TLS. Arguments replace the whole default command, so repeat its flags:
#
#   docker run --rm -p 7070:7070 -p 9464:9464 -v "$PWD/tls:/etc/stitchd/tls:ro" stitchd:0.1.0 \
#     --data-dir /var/lib/stitchd --socket /run/stitchd/stitchd.sock --grpc-listen 0.0.0.0:7070 \
#     --tls-cert-file /etc/stitchd/tls/tls.crt --tls-key-file /etc/stitchd/tls/tls.key \
#     --tls-client-ca-file /etc/stitchd/tls/ca.crt --grpc-require-tls
#
# with the PEM files readable by uid 10001 (the server certificate naming the host clients
# dial; clients present a certificate that ca.crt verifies). `--config FILE` with the same keys
# (deploy/k8s/configmap.yaml) does the same.

ARG DEBIAN_IMAGE=debian:bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
# Any image; only its /usr/local/cuda, if it has one, is used.
ARG CUDA_IMAGE=debian:bookworm-slim

# --- the parts of the CUDA toolkit stitchd uses, or nothing ---------------------------------
FROM ${CUDA_IMAGE} AS cuda
RUN <<'SH'
set -eu
cuda=/usr/local/cuda
mkdir -p /opt/cuda-build /opt/cuda-runtime
[ -d "$cuda" ] || exit 0
for dest in /opt/cuda-build /opt/cuda-runtime; do
  if [ -e "$cuda/bin/ptxas" ]; then
    mkdir -p "$dest/bin" && cp -L "$cuda/bin/ptxas" "$dest/bin/"
  fi
  if [ -e "$cuda/nvvm/libdevice/libdevice.10.bc" ]; then
    mkdir -p "$dest/nvvm/libdevice" && cp -L "$cuda/nvvm/libdevice/libdevice.10.bc" "$dest/nvvm/libdevice/"
  fi
  for lib in "$cuda"/lib64/libnvJitLink.so*; do
    [ -e "$lib" ] || continue
    mkdir -p "$dest/lib64" && cp -P "$lib" "$dest/lib64/"
  done
done
if [ -e "$cuda/include/nvJitLink.h" ]; then
  mkdir -p /opt/cuda-build/include && cp -L "$cuda/include/nvJitLink.h" /opt/cuda-build/include/
fi
echo "CUDA parts found:"; find /opt/cuda-build -type f -o -type l
SH

# --- build --------------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS builder
ARG STITCH_CMAKE_ARGS="-DSTITCH_BUILD_TESTS=OFF -DSTITCH_BUILD_BENCH=OFF"
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The packages first, so that changing the sources does not reinstall them. The test tools
# (.venv-tools) are not needed here.
COPY scripts/setup scripts/setup
RUN STITCH_SETUP_SKIP_PYTHON_TOOLS=1 scripts/setup && rm -rf /var/lib/apt/lists/*
# Empty in PTX-only builds; CMake then finds no toolkit and says "PTX-only mode".
COPY --from=cuda /opt/cuda-build/ /usr/local/cuda/
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache \
    scripts/build ${STITCH_CMAKE_ARGS} && build/daemon/stitchd --version
# The binaries, and the Debian packages that own the shared libraries they load.
RUN <<'SH'
set -eu
mkdir -p /staging/bin
for b in build/daemon/stitchd build/client/stitchctl; do
  strip --strip-debug -o "/staging/bin/$(basename "$b")" "$b"
done
ldd /staging/bin/stitchd /staging/bin/stitchctl | awk '$2 == "=>" && $3 ~ /^\// {print $3}' \
  | sort -u >/staging/libraries.txt
: >/staging/packages.txt
unowned=""
while read -r lib; do
  case "$lib" in /usr/local/cuda/*) continue ;; esac  # from the cuda stage
  real=$(readlink -f "$lib")
  pkg=""
  # The package of the file itself, not of a symlink to it (libLLVM-16.so.1 in /usr/lib/llvm-16
  # is llvm-16-dev's link to libllvm16's library). bookworm is half-way through merging /lib
  # into /usr/lib: try both spellings of each path.
  for p in "$real" "/usr$real" "${real#/usr}" "$lib" "/usr$lib" "${lib#/usr}"; do
    pkg=$(dpkg-query -S "$p" 2>/dev/null | grep -v '^diversion' | head -n1 | cut -d: -f1) || true
    [ -n "$pkg" ] && break
  done
  if [ -n "$pkg" ]; then echo "$pkg" >>/staging/packages.txt; else unowned="$unowned $lib"; fi
done </staging/libraries.txt
if [ -n "$unowned" ]; then
  echo "no Debian package owns:$unowned" >&2
  exit 1
fi
sort -u -o /staging/packages.txt /staging/packages.txt
echo "runtime packages:"; cat /staging/packages.txt
SH

# --- runtime ------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=builder /staging/packages.txt /tmp/packages.txt
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update -qq \
 && xargs -a /tmp/packages.txt apt-get install -y -qq --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/packages.txt
# ptxas, nvJitLink and libdevice at the paths the build recorded, when the build had them.
COPY --from=cuda /opt/cuda-runtime/ /usr/local/cuda/
COPY --from=builder /staging/bin/ /usr/local/bin/
# The daemon's user (the DaemonSet runs as 10001:10001) owns its data and socket directories.
RUN groupadd --system --gid 10001 stitchd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/stitchd --no-create-home \
      --shell /usr/sbin/nologin stitchd \
 && install -d -o 10001 -g 10001 -m 0755 /var/lib/stitchd /run/stitchd \
 && stitchd --version && stitchctl --help >/dev/null
ENV HOME=/var/lib/stitchd
USER 10001:10001
EXPOSE 7070 9464
ENTRYPOINT ["/usr/local/bin/stitchd"]
CMD ["--data-dir", "/var/lib/stitchd", "--socket", "/run/stitchd/stitchd.sock", "--grpc-listen", "0.0.0.0:7070"]
