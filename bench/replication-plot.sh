#!/usr/bin/env bash
# Draws bench/plots/replication-buffer.svg from bench/replication.sh's JSON
# (MODE=sync, corekv and redis primaries): the peak replica output buffer
# per data set and write load, Redis beside corekv without compression,
# with lz4 and with zstd. Needs jq.
set -euo pipefail
cd "$(dirname "$0")"
corekv=${1:-results/replication-corekv-sync.json}
redis=${2:-results/replication-redis-sync.json}
out=${3:-plots/replication-buffer.svg}
command -v jq >/dev/null || { echo "jq not found" >&2; exit 2; }
# "data/load series MB" lines; series: redis, no, lz4, zstd.
rows=$( {
  jq -r '.runs[] | "\(.data)/\(.load) redis \(.peak_buffer / 1048576)"' "$redis"
  jq -r '.runs[] | "\(.data)/\(.load) \(.compression) \(.peak_buffer / 1048576)"' "$corekv"
} )
awk -v rows="$rows" 'BEGIN {
  n = split(rows, lines, "\n")
  split("redis no lz4 zstd", series, " ")
  color["redis"] = "#999999"; color["no"] = "#1f77b4"; color["lz4"] = "#2ca02c"; color["zstd"] = "#d62728"
  label["redis"] = "redis-server"; label["no"] = "corekv, no compression"
  label["lz4"] = "corekv, lz4"; label["zstd"] = "corekv, zstd"
  groups = 0; max = 0
  for (i = 1; i <= n; i++) {
    split(lines[i], f, " ")
    if (!(f[1] in seen)) { seen[f[1]] = 1; order[++groups] = f[1] }
    mb[f[1], f[2]] = f[3]; if (f[3] > max) max = f[3]
  }
  W = 80 + groups * 70; H = 330; top = 40; base = 260; scale = (base - top) / max
  printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n", W, H
  printf "<text x=\"10\" y=\"18\" font-size=\"13\">Peak replica output buffer during a full sync (MB; 100 Mbit/s, 4000 values/s)</text>\n"
  for (t = 0; t <= 4; t++) {
    y = base - t * (base - top) / 4
    printf "<line x1=\"50\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"45\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", W - 10, y, y, y + 4, max * t / 4
  }
  for (g = 1; g <= groups; g++) {
    x0 = 60 + (g - 1) * 70
    for (s = 1; s <= 4; s++) {
      v = mb[order[g], series[s]] + 0; h = v * scale
      printf "<rect x=\"%d\" y=\"%.1f\" width=\"13\" height=\"%.1f\" fill=\"%s\"><title>%s %s: %.1f MB</title></rect>\n", x0 + (s - 1) * 14, base - h, h, color[series[s]], order[g], label[series[s]], v
    }
    printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x0 + 28, base + 15, order[g]
  }
  for (s = 1; s <= 4; s++) {
    printf "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", 60 + (s - 1) * 150, H - 30, color[series[s]], 74 + (s - 1) * 150, H - 21, label[series[s]]
  }
  print "</svg>"
}' > "$out"
echo "wrote bench/$out"
