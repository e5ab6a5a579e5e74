#!/usr/bin/env bash
# JVM artifacts from Maven Central, pinned in a pom of this folder, into a cache; prints the cache folder.
#
#   bash deploy/maven/fetch.sh kafka-broker     # -> ~/.cache/dspark-vllm/maven/kafka-broker-<pom hash>
#
# One pom per set (NAME.pom.xml: its dependencies, with their versions, are the set; and its <artifactItems>). Maven resolves the
# transitive dependencies and checks every file against Central's checksums (-C: a mismatch fails). The
# folder is named by the pom's hash, so a changed pom fetches again and an unchanged one costs nothing.
# Needs `mvn` (Debian's maven) and Maven Central; says so in one line and exits 1 when either is missing.
# Environment: DSPARK_MAVEN_CACHE (default ~/.cache/dspark-vllm/maven).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sets() { local pom; for pom in "$here"/*.pom.xml; do printf '%s ' "$(basename "$pom" .pom.xml)"; done; }
name="${1:?usage: fetch.sh NAME (one of: $(sets))}"
pom="$here/$name.pom.xml"
if [ ! -f "$pom" ]; then
    echo "fetch.sh: no set named '$name' (one of: $(sets))" >&2
    exit 2
fi
cache="${DSPARK_MAVEN_CACHE:-$HOME/.cache/dspark-vllm/maven}"
out="$cache/$name-$(sha256sum "$pom" | cut -c1-16)"
if [ -f "$out/.complete" ]; then
    echo "$out"
    exit 0
fi
if ! command -v mvn >/dev/null; then
    echo "fetch.sh: $name needs Maven ('mvn', Debian's package maven) to fetch its jars from Maven Central" >&2
    exit 1
fi
rm -rf "$out.partial"
mkdir -p "$out.partial"
# A jar whose own pom Maven cannot read (flink-model-openai 2.3.0 names a parent pom that Central does not
# serve) is listed in the pom's maven-dependency-plugin <artifactItems> instead: fetched alone, no dependencies.
goals=(dependency:copy-dependencies)
grep -q '<artifactItems>' "$pom" && goals+=(dependency:copy)
if ! mvn -q -B -C -f "$pom" "${goals[@]}" -DincludeScope=runtime \
    -DoutputDirectory="$out.partial" >"$out.partial.log" 2>&1; then
    echo "fetch.sh: could not fetch $name from Maven Central ($(grep -m1 -E 'ERROR' "$out.partial.log" | cut -c1-300); log: $out.partial.log)" >&2
    exit 1
fi
rm -f "$out.partial.log"
touch "$out.partial/.complete"
rm -rf "$out"
mv "$out.partial" "$out"
echo "$out"
