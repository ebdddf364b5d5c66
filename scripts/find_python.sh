#!/usr/bin/env bash
# Print the path of a working interpreter for one of the versions given (e.g. 3.12 3.13), first match
# wins: pythonX.Y on PATH (when it really runs: a pyenv shim for a version not selected does not), then
# pyenv's own versions folder, then /usr/bin and /usr/local/bin. Exits 1 naming what it tried.
set -euo pipefail
for version in "$@"; do
    candidates=("python$version")
    root="${PYENV_ROOT:-$HOME/.pyenv}"
    for dir in "$root"/versions/"$version"*/bin; do
        [[ -x "$dir/python$version" ]] && candidates+=("$dir/python$version")
    done
    candidates+=("/usr/local/bin/python$version" "/usr/bin/python$version")
    for candidate in "${candidates[@]}"; do
        if "$candidate" -c 'import venv' >/dev/null 2>&1; then
            command -v "$candidate"
            exit 0
        fi
    done
done
echo "find_python: no working python among versions $* (tried PATH, pyenv versions, /usr/bin); install one" >&2
exit 1
