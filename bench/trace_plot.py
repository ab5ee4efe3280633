#!/usr/bin/python3
"""trace_plot.py: a PNG of a zactor trace (--trace FILE), drawn as Perfetto
lays it out: a lane per task and activity (step, input, compute, exchange,
apply, checkpoint, evaluation), each event a box on a shared time axis.

    /usr/bin/python3 bench/trace_plot.py TRACE.json OUT.png [--window MS] [--at FRACTION]

--window: how many milliseconds to draw (default 60), starting --at this
fraction of the traced time (default 0.5, the middle). Needs python3-pil.
docs/monitoring.md's picture is made so from a real job's trace.
"""
import argparse
import json
import sys

from PIL import Image, ImageDraw, ImageFont

ROWS = ["step", "input", "compute", "exchange", "apply", "checkpoint", "evaluation"]
COLOURS = {"step": (120, 144, 156), "input": (255, 183, 77), "compute": (66, 133, 244),
           "exchange": (219, 68, 55), "apply": (15, 157, 88), "checkpoint": (171, 71, 188),
           "evaluation": (0, 172, 193), "bucket": (244, 143, 177),
           "forward": (144, 202, 249), "backward": (21, 101, 192)}
#  Events nested in a lane's own (forward and backward in compute): drawn in
#  its lower half, over it.
NESTED = {"forward", "backward"}
LANE, GAP, LEFT, TOP, WIDTH = 18, 6, 190, 40, 1400


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("png")
    parser.add_argument("--window", type=float, default=60.0, help="milliseconds drawn")
    parser.add_argument("--at", type=float, default=0.5, help="start, as a fraction")
    args = parser.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    names, threads, boxes = {}, {}, []
    #  Outer events first, so that nested ones are drawn over them.
    events = sorted(events, key=lambda e: e.get("name") in NESTED)
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] == "X":
            boxes.append(e)
    if not boxes:
        sys.exit("trace_plot: %s holds no events" % args.trace)
    first = min(e["ts"] for e in boxes)
    last = max(e["ts"] + e["dur"] for e in boxes)
    start = first + args.at * (last - first)
    end = start + args.window * 1000
    lanes = sorted(threads, key=lambda k: (names.get(k[0], ""), k[1]))
    height = TOP + len(lanes) * (LANE + 2) + GAP * len(names) + 40
    image = Image.new("RGB", (LEFT + WIDTH + 20, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    draw.text((10, 10), "%s: %.0f ms from %.3f s of the trace" %
              (args.trace.split("/")[-1], args.window, (start - first) / 1e6),
              fill="black", font=font)
    y, row_y, previous = TOP, {}, None
    for pid, tid in lanes:
        if previous is not None and pid != previous:
            y += GAP
        previous = pid
        row_y[(pid, tid)] = y
        draw.text((10, y + 3), "%s  %s" % (names.get(pid, pid), threads[(pid, tid)]),
                  fill="black", font=font)
        y += LANE + 2
    scale = WIDTH / (end - start)
    for e in boxes:
        if (e["pid"], e["tid"]) not in row_y or e["ts"] > end or e["ts"] + e["dur"] < start:
            continue
        x0 = LEFT + max(e["ts"] - start, 0) * scale
        x1 = LEFT + min(e["ts"] + e["dur"] - start, end - start) * scale
        top = row_y[(e["pid"], e["tid"])]
        row = threads[(e["pid"], e["tid"])]
        nested = e["name"] in NESTED
        colour = COLOURS.get(e["name"] if nested else row, "grey")
        draw.rectangle([x0, top + (LANE // 2 if nested else 0), max(x1, x0 + 1), top + LANE],
                       fill=colour, outline=(40, 40, 40) if x1 - x0 > 3 else None)
    for tick in range(0, int(args.window) + 1, max(int(args.window) // 10, 1)):
        x = LEFT + tick * 1000 * scale
        draw.line([x, y + 2, x, y + 8], fill="black")
        draw.text((x - 8, y + 10), "%d ms" % tick, fill="black", font=font)
    image.save(args.png)
    print("trace_plot: %d lanes, %.0f ms, in %s" % (len(lanes), args.window, args.png))


if __name__ == "__main__":
    main()
