#!/usr/bin/env bash
# The README's install command in a fresh virtualenv: `pip install ./python` builds
# libstitch_client.so with CMake (scikit-build-core comes from PyPI) and bundles it in the
# package, without stitch.torch's C++ launch path (the build environment has no PyTorch); then client_test.py runs with that virtualenv's interpreter against a real stitchd,
# importing the installed package only.
#
#   install_test.sh --stitchd PATH
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
stitchd=
while (($#)); do
  case $1 in
    --stitchd) stitchd=$2; shift 2 ;;
    *) echo "install_test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $stitchd ]] || { echo "FAIL: stitchd not found at '$stitchd'" >&2; exit 1; }

tmp=$(mktemp -d /tmp/stitch-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv "$tmp/venv"
start=$(date +%s)
# The build's own temporary folder, not one left in the repository.
if ! (cd "$tmp" && "$tmp/venv/bin/python" -m pip install --disable-pip-version-check \
        --no-cache-dir "$source_dir/python") > "$tmp/pip.log" 2>&1; then
  tail -60 "$tmp/pip.log" >&2
  echo "FAIL: pip install $source_dir/python" >&2
  exit 1
fi
echo "PASS pip install took $(($(date +%s) - start)) s"
# Built in pip's isolated environment, which has no PyTorch: the wheel holds the client library
# alone, whatever PyTorch the checkout's own virtualenvs have (install_torch_test.sh: the other case).
if ls "$tmp"/venv/lib/python3*/site-packages/stitch/libstitch_torch_launch.so >/dev/null 2>&1; then
  echo "FAIL: an isolated build bundled libstitch_torch_launch.so" >&2
  exit 1
fi
"$tmp/venv/bin/python" -c 'import stitch, stitch._lib; print("installed", stitch.__file__, stitch._lib.library_path())'
(cd "$tmp" && "$tmp/venv/bin/python" -m stitch --help > /dev/null)
"$tmp/venv/bin/python" "$source_dir/tests/python/client_test.py" --installed --stitchd "$stitchd"
echo "all checks passed"
