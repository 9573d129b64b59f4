#!/usr/bin/env bash
# Makes (once) a lab member who uses Jupyter: Unix account MEMBER (default lanes-test-nb) with a
# home and bash, whose ~/.profile activates ~/jvenv, a virtual environment of the system's Python
# with jupyter-server and ipykernel installed from the wheels `make tools-test` downloaded
# (LANES_TEST_JUPYTER_WHEELS), as a member installs them from PyPI. Root only. The notebook
# integration test, the notebook browser test and bench/notebook.sh use it; one maker at a
# time (the two backends' suites run side by side).
set -euo pipefail
member=${1:-lanes-test-nb}
wheels=${LANES_TEST_JUPYTER_WHEELS:?run through make (make tools-test downloads the wheels)}
exec 9>/tmp/lanes-test-jvenv.lock
flock 9
id "$member" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$member" 2>/dev/null || id "$member" >/dev/null
home=$(getent passwd "$member" | cut -d: -f6)
printf '# as a member sets up their own Python\n. "$HOME/jvenv/bin/activate"\n' > "$home/.profile"
chown "$member:" "$home/.profile"
if [ ! -x "$home/jvenv/bin/jupyter-server" ]; then
  rm -rf "$home/jvenv"
  /usr/bin/python3 -m venv "$home/jvenv"
  "$home/jvenv/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$wheels" jupyter-server ipykernel
  chown -R "$member:" "$home/jvenv"
fi
echo "$home"
