#!/bin/sh
# Make the seed corpus of every fuzz target from the shipped files: profiles/ for `profile`,
# scenarios/ for `scenario` and `run`, and for `run` also each scenario followed by its own
# platform's profile (the `#%profile` form). Run from anywhere; writes fuzz/corpus/<target>/.
set -eu
fuzz=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$fuzz")
mkdir -p "$fuzz/corpus/profile" "$fuzz/corpus/scenario" "$fuzz/corpus/run"
for p in "$root"/profiles/*.toml; do
    cp "$p" "$fuzz/corpus/profile/$(basename "$p")"
done
for s in "$root"/scenarios/*.toml; do
    name=$(basename "$s" .toml)
    cp "$s" "$fuzz/corpus/scenario/$name.toml"
    # Few iterations: the run target caps each run's work, and the shipped counts exceed it.
    sed -e 's/^iterations = .*/iterations = 2/' -e 's/^packets = .*/packets = 2000/' "$s" \
        > "$fuzz/corpus/run/$name.toml"
    platform=$(sed -n 's/^platform = "\([^"]*\)".*/\1/p' "$s")
    if [ -f "$root/profiles/$platform.toml" ]; then
        { cat "$fuzz/corpus/run/$name.toml"; printf '\n#%%profile\n'; cat "$root/profiles/$platform.toml"; } \
            > "$fuzz/corpus/run/$name+profile.toml"
    fi
done
echo "seeded $(ls "$fuzz/corpus/profile" | wc -l) profile, $(ls "$fuzz/corpus/scenario" | wc -l) scenario, $(ls "$fuzz/corpus/run" | wc -l) run inputs in $fuzz/corpus"
