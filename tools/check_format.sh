#!/usr/bin/env bash
# Checks that every C, C++ and header file under version control is formatted
# as .clang-format says (clang-format --dry-run -Werror). With --fix, formats
# them in place instead. tools/setup.sh installs clang-format from Debian.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v clang-format >/dev/null 2>&1; then
    echo "check_format.sh: clang-format is not installed (tools/setup.sh installs it)" >&2
    exit 1
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp')
if [ "${1:-}" = --fix ]; then
    clang-format -i "${files[@]}"
    echo "check_format.sh: formatted ${#files[@]} files"
    exit 0
fi
if clang-format --dry-run -Werror "${files[@]}"; then
    echo "check_format.sh: ${#files[@]} files formatted as .clang-format says"
else
    echo "check_format.sh: run tools/check_format.sh --fix (clang-format $(clang-format --version | sed 's/.*version //'))" >&2
    exit 1
fi
