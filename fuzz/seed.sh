#!/bin/sh
# Make the seed corpus of every fuzz target from the shipped files: profiles/ for `profile`,
# scenarios/ for `scenario` and `run`, and for `run` also each scenario followed by its own
# platform's profile (the `#%profile` form); for `trace`, a few lines of each trace format.
# Run from anywhere; writes fuzz/corpus/<target>/.
set -eu
fuzz=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$fuzz")
mkdir -p "$fuzz/corpus/profile" "$fuzz/corpus/scenario" "$fuzz/corpus/run" "$fuzz/corpus/trace"
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
cat > "$fuzz/corpus/trace/ftrace.txt" <<'TRACE'
# tracer: nop
  app-9 [001] ..... 10.500000: dma_map_sg: 0000:01:00.0 dir=TO_DEVICE dma_addrs={0x1000,0x2000} sizes={0x1000,0x1000} phys_addrs={0x80001000,0x80002000} attrs=
  app-9 [001] ..... 10.500100: dma_sync_sg_for_device: 0000:01:00.0 dir=TO_DEVICE dma_addrs={0x1000,0x2000} sizes={0x1000,0x1000}
  app-9 [001] ..... 10.500200: dma_unmap_sg: 0000:01:00.0 dir=TO_DEVICE phys_addrs={0x80001000,0x80002000} attrs=
  app-9 [001] ..... 10.600000: dma_map_phys: 0000:01:00.0 dir=FROM_DEVICE dma_addr=ffd00000 size=2048 phys_addr=1a2b3c000 attrs=SKIP_CPU_SYNC
  app-9 [001] ..... 10.600100: map: IOMMU: iova=0x00000000ffd00000 - 0x00000000ffd01000 paddr=0x00000001a2b3c000 size=4096
  app-9 [001] ..... 10.600200: swiotlb_bounced: dev_name: 0000:01:00.0 dma_mask=ffffffff dev_addr=100000000 size=1500 FORCE
TRACE
cat > "$fuzz/corpus/trace/raw.txt" <<'TRACE'
app-9 [001] 12.000001: dma_unmap_phys: device=0000:01:00.0 addr=1000 size=64 dir=2 attrs=0x0
app-9 [001] 12.1: dma_map_sg: device=d full_nents=200 full_ents=200 truncated=1 phys_addrs=ARRAY[00, 10, 00, 80, 00, 00, 00, 00] dma_addrs=ARRAY[00, 10, 00, 00, 00, 00, 00, 00] lengths=ARRAY[00, 10, 00, 00] dir=1 attrs=0x0
   app  9123 [002]  4567.000123456:  dma:dma_sync_single_for_cpu: 0000:01:00.0 dir=FROM_DEVICE dma_addr=1000 size=64
TRACE
# And the replay's fixtures: one per print-format generation, the capped list, the misuses.
cp "$root"/tests/data/traces/*.txt "$fuzz/corpus/trace/"
echo "seeded $(ls "$fuzz/corpus/profile" | wc -l) profile, $(ls "$fuzz/corpus/scenario" | wc -l) scenario, $(ls "$fuzz/corpus/run" | wc -l) run, $(ls "$fuzz/corpus/trace" | wc -l) trace inputs in $fuzz/corpus"
