#!/usr/bin/env bash
# `pip install --no-build-isolation ./python` in a fresh virtualenv that sees the PyTorch 2.x of
# .venv-torch2/ (through a .pth file, as an environment with PyTorch installed would): the
# wheel must bundle libstitch_torch_launch.so built for that PyTorch, stitch.torch must find
# and load it with nothing set, and the C++ launch path's tests (torch_launch_test.py, against
# the loader's stand-in driver) must pass with that library.
#
#   install_torch_test.sh --torch-venv DIR --stitchd PATH --stitchctl PATH --library PATH
#       --fake-driver PATH
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
torch_venv= stitchd= stitchctl= library= fake_driver=
while (($#)); do
  case $1 in
    --torch-venv) torch_venv=$2; shift 2 ;;
    --stitchd) stitchd=$2; shift 2 ;;
    --stitchctl) stitchctl=$2; shift 2 ;;
    --library) library=$2; shift 2 ;;
    --fake-driver) fake_driver=$2; shift 2 ;;
    *) echo "install_torch_test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
site=$(ls -d "$torch_venv"/lib/python3*/site-packages 2>/dev/null | head -n1)
[[ -n $site && -d $site/torch ]] || { echo "FAIL: no torch under '$torch_venv'" >&2; exit 1; }

tmp=$(mktemp -d /tmp/stitch-install-torch-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The torch virtualenv's own interpreter version: PyTorch's extension modules are built for it.
base=$(sed -n 's/^home = //p' "$torch_venv/pyvenv.cfg")
"$base/python3" -m venv "$tmp/venv"
venv_site=$(ls -d "$tmp"/venv/lib/python3*/site-packages)
echo "$site" > "$venv_site/torch2.pth"
pip=("$tmp/venv/bin/python" -m pip install --disable-pip-version-check --no-cache-dir)
start=$(date +%s)
if ! (cd "$tmp" && "${pip[@]}" "scikit-build-core>=0.11,<2" &&
      "${pip[@]}" --no-build-isolation "$source_dir/python") > "$tmp/pip.log" 2>&1; then
  tail -60 "$tmp/pip.log" >&2
  echo "FAIL: pip install --no-build-isolation $source_dir/python" >&2
  exit 1
fi
echo "PASS pip install --no-build-isolation took $(($(date +%s) - start)) s"
bundled="$venv_site/stitch/libstitch_torch_launch.so"
[[ -f $bundled ]] || { echo "FAIL: the wheel holds no $bundled" >&2; ls "$venv_site/stitch" >&2; exit 1; }
# The installed package finds and loads it with nothing set.
(cd "$tmp" && env -u STITCH_TORCH_LAUNCH_LIBRARY "$tmp/venv/bin/python" - "$bundled" <<'PY'
import sys
from stitch.torch import _launch
ok, where = _launch.status()
assert ok and where == sys.argv[1], (ok, where)
print("PASS the installed stitch.torch loads", where)
PY
)
"$tmp/venv/bin/python" "$source_dir/tests/python/torch_launch_test.py" --stitchd "$stitchd" \
  --stitchctl "$stitchctl" --library "$library" --fake-driver "$fake_driver" --extension "$bundled"
echo "all checks passed"
