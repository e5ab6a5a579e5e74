#!/usr/bin/env bash
# Merge flat `key: value` files into "$FLINK_HOME/conf/config.yaml" with Flink's own parser.
#
#   apply.sh FILE...
#
# Blank lines and lines starting with '#' are skipped; the key ends at the first ':' and the
# value is the rest of the line without surrounding blanks. tests/test_deploy.py runs this same
# script against the PyFlink wheel's bin/ and a copy of its conf/.
set -euo pipefail

: "${FLINK_HOME:?FLINK_HOME must point at a Flink distribution}"

args=()
for file in "$@"; do
    while IFS= read -r line || [ -n "$line" ]; do
        trimmed="${line#"${line%%[![:space:]]*}"}"
        case "$trimmed" in '' | '#'*) continue ;; esac
        key="${trimmed%%:*}"
        value="${trimmed#*:}"
        key="${key%"${key##*[![:space:]]}"}"
        value="${value#"${value%%[![:space:]]*}"}"
        value="${value%"${value##*[![:space:]]}"}"
        if [ -z "$key" ] || [ -z "$value" ] || [ "$key" = "$trimmed" ]; then
            echo "apply.sh: $file: not a 'key: value' line: $line" >&2
            exit 2
        fi
        args+=("-D${key}=${value}")
    done <"$file"
done

if [ "${#args[@]}" -eq 0 ]; then
    exit 0
fi

# config-parser-utils.sh exits 0 even when Flink's parser fails, and then leaves the error text
# in config.yaml in place of the configuration: keep a copy, and fail the build on that text.
conf="$FLINK_HOME/conf/config.yaml"
cp "$conf" "$conf.before-apply"
"$FLINK_HOME/bin/config-parser-utils.sh" "$FLINK_HOME/conf" "$FLINK_HOME/bin" "$FLINK_HOME/lib" "${args[@]}"
if grep -q '^\[ERROR\]' "$conf"; then
    cat "$conf" >&2
    mv "$conf.before-apply" "$conf"
    echo "apply.sh: Flink could not merge $* into $conf (left unchanged)" >&2
    exit 1
fi
rm "$conf.before-apply"
