# refit report in a real browser: headless Chromium renders report.html made from a results
# file of this test (three modes, two bucket sizes). The screenshot is not blank and shows the
# modes' colours, and the DOM Chromium built holds each chart with the number of series and
# points that file implies. Exits 77 (skipped) where no Chromium is installed.
. "$(dirname "$0")/../cli/lib.sh"

BROWSER=""
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null; then
    BROWSER=$(command -v "$name")
    break
  fi
done
[ -n "$BROWSER" ] || { echo "skipped: no chromium binary found"; exit 77; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

A="$TMP/a.h5"
for bucket in 64KiB 1MiB; do
  expect_exit 0 "${MPIRUN[@]}" -np 4 "$REFIT" run --model tiny --trainer fsdp=2 --rollout tp=2 \
    --mode unfused,grouped,fused --bucket-size "$bucket" --iters 3 --output "$A"
  expect_rows 3
done
expect_exit 0 "$REFIT" report "$A" -o "$TMP/rep"
[ "$failures" -eq 0 ] || finish

# chrome FLAGS...: headless Chromium with its own profile, bounded in time.
chrome() {
  timeout 120 "$BROWSER" --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/profile" \
    --window-size=1280,2400 "$@" "file://$TMP/rep/report.html" 2>"$TMP/chrome.err"
}
chrome --screenshot="$TMP/shot.png" >/dev/null ||
  fail "chromium could not take a screenshot: $(tail -c 600 "$TMP/chrome.err")"
chrome --dump-dom >"$TMP/dom.html" ||
  fail "chromium could not dump the DOM: $(tail -c 600 "$TMP/chrome.err")"

# The PNG, decoded with zlib alone: its size, and that it holds many colours including the
# bar colours of the three modes (#4e79a7, #f28e2b, #59a14f), which only drawn SVG can give.
"$PY" - "$TMP/shot.png" >"$TMP/png" 2>&1 <<'EOF' || fail "screenshot: $(cat "$TMP/png")"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
assert depth == 8 and colour in (2, 6), "unexpected PNG depth %d colour type %d" % (depth, colour)
bpp = 3 if colour == 2 else 4
raw, stride = zlib.decompress(idat), width * bpp
prev, colours = bytearray(stride), set()
for y in range(height):
    kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if kind == 1: line[i] = (line[i] + a) & 255
        elif kind == 2: line[i] = (line[i] + b) & 255
        elif kind == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif kind == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    colours.update(bytes(line[x:x + 3]) for x in range(0, stride, bpp))
    prev = line
assert (width, height) == (1280, 2400), "screenshot is %dx%d" % (width, height)
assert len(colours) > 16, "only %d distinct colours: blank page" % len(colours)
for hexcode in ("4e79a7", "f28e2b", "59a14f"):
    assert bytes.fromhex(hexcode) in colours, "no pixel of colour #" + hexcode
print(len(colours))
EOF

# The charts in the rendered DOM: "id file series points" per chart, each series' points.
"$PY" - "$TMP/dom.html" >"$TMP/charts" 2>&1 <<'EOF' || fail "DOM: $(cat "$TMP/charts")"
import sys
from html.parser import HTMLParser
class Charts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.charts, self.depth = [], 0
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "svg" and "chart" in classes:
            self.charts.append([a["data-chart"], a["data-file"], []])
        elif tag == "g" and "series" in classes:
            self.charts[-1][2].append([a["data-series"], 0])
        elif "point" in classes:
            self.charts[-1][2][-1][1] += 1
p = Charts()
p.feed(open(sys.argv[1]).read())
for chart_id, file, series in p.charts:
    print(chart_id, file, " ".join("%s=%d" % (name, n) for name, n in series))
EOF
expected="modes_buckets 1 unfused=2 grouped=2 fused=2
bandwidth 1 unfused=2 grouped=2 fused=2
layouts 1 p2p=1
phases 1 setup=6 reshape=6 encode=6 pack=6 transfer=6 unpack=6 apply=6
spread 1 median=6 p99=6"
[ "$(cat "$TMP/charts")" = "$expected" ] || fail "charts in the DOM:
$(cat "$TMP/charts")
expected:
$expected"
finish
