"""`specscope bench --plots`: the bench's charts as SVG text, from results.json alone.

Four charts, the same the /results page draws (static/js/model/results.js derives the same series):

    speedup.svg           speedup vs ar per policy, Hugging Face's own decoding beside, a line at 1×
    tau-by-category.svg   τ per policy per prompt category, as Spec-Bench reports it
    tau-vs-tree-size.svg  tokens emitted per step against the verified tree's size, per policy
    cost-curve.svg        the target's forward time of n tokens over one token, per cached context

and, for `bench --batch B1,B2,…`, a fifth:

    speedup-vs-batch.svg  speedup vs ar at the same batch against the batch size, per policy

Pure Python writing SVG text: no plotting library, nothing to install. Every mark carries its data
(`data-policy`, `data-value`, …) so tests and readers can check a chart against results.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from tools.report import BenchReport, PolicyResult

# Okabe–Ito: told apart under the common colour-vision deficiencies; Hugging Face's baselines are grey.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#882255", "#000000"]
BASELINE_GREY = "#8c8c8c"
AR_GREY = "#4d4d4d"
HF_BASELINES = ("hf-generate", "hf-prompt-lookup")

CHARTS = [  # (file name, title)
    ("speedup.svg", "Speedup vs ar per policy"),
    ("tau-by-category.svg", "τ per policy per prompt category"),
    ("tau-vs-tree-size.svg", "τ against the verified tree's size"),
    ("cost-curve.svg", "Cost of verifying n tokens over one"),
]


# ---------------------------------------------------------------- series: results.json -> numbers to draw

def is_baseline(label: str) -> bool:
    return label.split(":")[0] in HF_BASELINES


def colour_of(results: list[PolicyResult]) -> dict[str, str]:
    """One colour per policy label, stable across charts: ar dark grey, Hugging Face grey, the rest in turn."""
    colours, drafting = {}, 0
    for result in results:
        label = result.policy
        if label == "ar":
            colours[label] = AR_GREY
        elif is_baseline(label):
            colours[label] = BASELINE_GREY
        else:
            colours[label] = PALETTE[drafting % len(PALETTE)]
            drafting += 1
    return colours


def speedup_series(report: BenchReport) -> list[dict[str, Any]]:
    """[{label, value, baseline, interval}] in the report's order; ar reads 1.00 by definition; interval: the
    speedup's (low, high) with the prompts drawn again (tools/report.py's speedup_interval), else None."""
    return [{"label": r.policy, "value": 1.0 if r.policy == "ar" else r.speedup_vs_ar,
             "baseline": is_baseline(r.policy), "interval": r.speedup_interval} for r in report.results]


def tau_by_category_series(report: BenchReport) -> dict[str, Any]:
    """Categories and, per drafting policy, τ in each (None where a category had no steps)."""
    categories = report.categories
    series = [{"label": r.policy, "values": [r.by_category[c].tau if c in r.by_category else None for c in categories]}
              for r in report.results if r.tau is not None and r.policy != "ar"]
    return {"categories": categories, "series": series}


def tau_vs_size_series(report: BenchReport) -> list[dict[str, Any]]:
    """Per drafting policy, one point per verified tree size: mean tokens emitted by its steps, and how many."""
    out = []
    for r in report.results:
        if r.tau is None or r.policy == "ar" or not r.tree_sizes:
            continue
        points = [{"size": size, "steps": steps, "tau": emitted / steps} for size, steps, emitted in r.tree_sizes]
        out.append({"label": r.policy, "points": points})
    return out


def cost_series(report: BenchReport) -> dict[str, Any] | None:
    """n and, per measured context, time(n) / time(1); None where the run had no cost table."""
    curve = report.cost_curve
    if curve is None:
        return None
    return {"ns": curve.ns, "source": curve.source,
            "lines": [{"context": context, "ratio": ratio} for context, ratio in zip(curve.contexts, curve.ratio)]}


# ---------------------------------------------------------------- scales

def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 × 10^k.

    >>> nice_ticks(0, 1.32)
    [0.0, 0.5, 1.0, 1.5]
    >>> nice_ticks(0, 7)
    [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value < high + step * 1e-9:
        ticks.append(float(round(value, 10)))
        value += step
    if ticks[-1] < high - 1e-9:
        ticks.append(float(round(value, 10)))
    return ticks


@dataclass
class Linear:
    """Maps [low, high] onto pixels [start, end] (end < start for a y axis drawn upwards)."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return self.start + (value - self.low) / span * (self.end - self.start)


def log2_ticks(values: list[int]) -> list[float]:
    """Ticks of a log₂ axis over measured values: the powers of two among them, and the last.

    >>> log2_ticks(list(range(1, 65)))
    [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    >>> log2_ticks([1, 3, 5, 48])
    [1.0, 48.0]
    """
    last = max(values)
    return [float(v) for v in values if math.log2(v).is_integer() or v == last]


@dataclass
class Log2:
    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = math.log2(self.high / self.low) or 1.0
        return self.start + math.log2(value / self.low) / span * (self.end - self.start)


# ---------------------------------------------------------------- SVG text

def fmt(value: float) -> str:
    """Numbers in SVG attributes: short, no trailing zeros.

    >>> fmt(12.0), fmt(3.14159), fmt(-0.0)
    ('12', '3.14', '0')
    """
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def attrs(**values: Any) -> str:
    parts = []
    for key, value in values.items():
        if value is None:
            continue
        name = key.rstrip("_").replace("_", "-")
        text = fmt(value) if isinstance(value, float) else str(value)
        parts.append(f'{name}="{escape(text, quote=True)}"')
    return " ".join(parts)


@dataclass
class Svg:
    """A chart being written: a plot area inside margins, a title, marks appended as text."""

    title: str
    width: int = 640
    height: int = 360
    left: int = 64
    right: int = 24
    top: int = 40
    bottom: int = 56
    body: list[str] = field(default_factory=list)

    @property
    def plot(self) -> tuple[float, float, float, float]:
        """(x0, x1, y0, y1) of the plot area, y0 the bottom."""
        return self.left, self.width - self.right, self.height - self.bottom, self.top

    def add(self, tag: str, text: str | None = None, **values: Any) -> None:
        inner = "" if text is None else escape(text)
        self.body.append(f"<{tag} {attrs(**values)}>{inner}</{tag}>" if text is not None
                         else f"<{tag} {attrs(**values)}/>")

    def text(self, x: float, y: float, text: str, **values: Any) -> None:
        self.add("text", text, x=float(x), y=float(y), **values)

    def x_axis(self, scale: Any, ticks: list[float], label: str, tick_text=fmt) -> None:
        x0, x1, y0, _ = self.plot
        self.add("line", class_="axis", x1=float(x0), y1=float(y0), x2=float(x1), y2=float(y0), stroke="#333")
        for tick in ticks:
            x = scale(tick)
            self.add("line", x1=float(x), y1=float(y0), x2=float(x), y2=float(y0 + 4), stroke="#333")
            self.text(x, y0 + 17, tick_text(tick), text_anchor="middle", class_="tick")
        self.text((x0 + x1) / 2, self.height - 12, label, text_anchor="middle", class_="axis-label")

    def y_axis(self, scale: Any, ticks: list[float], label: str, tick_text=fmt) -> None:
        x0, x1, y0, y1 = self.plot
        self.add("line", class_="axis", x1=float(x0), y1=float(y0), x2=float(x0), y2=float(y1), stroke="#333")
        for tick in ticks:
            y = scale(tick)
            self.add("line", x1=float(x0), y1=float(y), x2=float(x1), y2=float(y), stroke="#e3e3e3")
            self.text(x0 - 6, y + 4, tick_text(tick), text_anchor="end", class_="tick")
        self.add("text", label, x=14.0, y=float((y0 + y1) / 2), text_anchor="middle", class_="axis-label",
                 transform=f"rotate(-90 14 {fmt((y0 + y1) / 2)})")

    def note(self, text: str) -> None:
        x0, x1, y0, y1 = self.plot
        self.text((x0 + x1) / 2, (y0 + y1) / 2, text, text_anchor="middle", class_="note", fill="#555")

    def legend(self, items: list[tuple[str, str]], y: float | None = None) -> None:
        """Swatches in one row under the title, wrapping onto more rows if needed."""
        x, y = float(self.left), float(self.top - 14 if y is None else y)
        for label, colour in items:
            width = 22 + 7 * len(label)
            if x + width > self.width - self.right:
                x, y = float(self.left), y + 16
            self.add("rect", x=x, y=y - 9, width=10, height=10, fill=colour)
            self.text(x + 14, y, label, class_="legend")
            x += width

    def render(self, kind: str) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" {attrs(width=self.width, height=self.height)} '
                f'viewBox="0 0 {self.width} {self.height}" role="img" {attrs(data_chart=kind)} '
                f'font-family="system-ui, sans-serif" font-size="12">')
        style = ("<style>.tick{fill:#444;font-size:11px}.axis-label{fill:#222;font-size:12px}"
                 ".title{font-size:14px;font-weight:600}.legend{font-size:11px}.value{font-size:11px;fill:#222}</style>")
        title = f'<title>{escape(self.title)}</title><text {attrs(x=8.0, y=18.0, class_="title")}>{escape(self.title)}</text>'
        return "\n".join([head, style, title, *self.body, "</svg>"]) + "\n"


# ---------------------------------------------------------------- the four charts

def speedup_chart(report: BenchReport) -> str:
    bars = speedup_series(report)
    colours = colour_of(report.results)
    names = [bar["label"] for bar in bars]  # Hugging Face's baselines (hf-…) are told by their grey
    drawn = report.interval  # how the whiskers' intervals were drawn; None: there are none
    svg = Svg("Speedup vs ar (tokens/s over ar's, same prompts)", height=max(200, 96 + 28 * len(bars)) + 16 * bool(drawn),
              left=16 + 7 * max(map(len, names), default=4), top=40 + 16 * bool(drawn))
    x0, x1, y0, y1 = svg.plot
    values = [b["value"] for b in bars if b["value"] is not None] + [b["interval"][1] for b in bars if b["interval"]]
    scale = Linear(0, max(nice_ticks(0, 1.15 * max(values + [1.0]))), x0, x1)  # room for the value labels
    ticks = nice_ticks(0, scale.high)
    svg.x_axis(scale, ticks, "speedup vs ar (×)", tick_text=lambda t: f"{fmt(t)}×")
    band = (y0 - y1) / max(len(bars), 1)
    for i, (bar, name) in enumerate(zip(bars, names)):
        y = y1 + i * band + band * 0.18
        height = band * 0.64
        svg.text(x0 - 8, y + height / 2 + 4, name, text_anchor="end", class_="tick")
        if bar["value"] is None:
            continue
        svg.add("rect", x=float(x0), y=y, width=max(scale(bar["value"]) - x0, 1.0), height=height,
                fill=colours[bar["label"]], data_policy=bar["label"], data_value=fmt(bar["value"]),
                data_baseline=str(bar["baseline"]).lower(), fill_opacity=0.55 if bar["baseline"] else None)
        right = scale(bar["value"])
        if bar["interval"]:  # a whisker over the speedup's interval with the prompts drawn again
            low, high = bar["interval"]
            middle = y + height / 2
            svg.add("line", x1=scale(low), y1=middle, x2=scale(high), y2=middle, stroke="#222", class_="interval",
                    data_policy=bar["label"], data_low=fmt(low), data_high=fmt(high))
            for end in (low, high):
                svg.add("line", x1=scale(end), y1=middle - 4, x2=scale(end), y2=middle + 4, stroke="#222")
            right = max(right, scale(high))
        svg.text(right + 4, y + height / 2 + 4, f"{bar['value']:.2f}×", class_="value")
    svg.add("line", x1=scale(1.0), y1=float(y1), x2=scale(1.0), y2=float(y0), stroke="#222",
            stroke_dasharray="4 3", class_="reference")
    if drawn:
        svg.text(8, 36, f"whiskers: where {drawn.level:.0%} of the speedups fall with the prompts drawn "
                 f"again ({drawn.draws} draws)", class_="legend")
    return svg.render("speedup")


def tau_by_category_chart(report: BenchReport) -> str:
    data = tau_by_category_series(report)
    categories, series = data["categories"], data["series"]
    colours = colour_of(report.results)
    svg = Svg("τ (tokens per step) per prompt category", width=max(640, 90 + 24 * len(categories) * max(len(series), 1)),
              top=56)
    x0, x1, y0, y1 = svg.plot
    values = [v for s in series for v in s["values"] if v is not None]
    if not categories or not values:
        svg.note("no categories with drafting steps in this run")
        return svg.render("tau-by-category")
    scale = Linear(0, max(nice_ticks(0, max(values))), y0, y1)
    svg.y_axis(scale, nice_ticks(0, scale.high), "τ (tokens emitted per step)")
    group = (x1 - x0) / len(categories)
    bar_width = group * 0.8 / len(series)
    for c, category in enumerate(categories):
        left = x0 + c * group + group * 0.1
        svg.text(x0 + (c + 0.5) * group, y0 + 17, category or "—", text_anchor="middle", class_="tick")
        for s, line in enumerate(series):
            value = line["values"][c]
            if value is None:
                continue
            svg.add("rect", x=left + s * bar_width, y=scale(value), width=max(bar_width - 1, 1.0),
                    height=y0 - scale(value), fill=colours[line["label"]], data_policy=line["label"],
                    data_category=category, data_value=fmt(value))
    svg.add("line", class_="axis", x1=float(x0), y1=float(y0), x2=float(x1), y2=float(y0), stroke="#333")
    svg.add("line", x1=float(x0), y1=scale(1.0), x2=float(x1), y2=scale(1.0), stroke="#222", stroke_dasharray="4 3",
            class_="reference")
    svg.text((x0 + x1) / 2, svg.height - 12, "prompt category (dashed: ar's τ = 1)", text_anchor="middle",
             class_="axis-label")
    svg.legend([(line["label"], colours[line["label"]]) for line in series], y=36)
    return svg.render("tau-by-category")


def tau_vs_size_chart(report: BenchReport) -> str:
    series = tau_vs_size_series(report)
    colours = colour_of(report.results)
    svg = Svg("Tokens per step against the verified tree's size", top=56)
    x0, x1, y0, y1 = svg.plot
    points = [p for s in series for p in s["points"]]
    if not points:
        svg.note("no drafting steps in this run")
        return svg.render("tau-vs-tree-size")
    x_scale = Linear(0, max(nice_ticks(0, max(p["size"] for p in points) or 1)), x0, x1)
    y_scale = Linear(0, max(nice_ticks(0, max(p["tau"] for p in points))), y0, y1)
    svg.x_axis(x_scale, nice_ticks(0, x_scale.high), "draft nodes verified in the step (tree size)")
    svg.y_axis(y_scale, nice_ticks(0, y_scale.high), "tokens emitted per step (mean)")
    most = max(p["steps"] for p in points)
    for line in series:
        for p in line["points"]:
            svg.add("circle", cx=x_scale(p["size"]), cy=y_scale(p["tau"]), r=2.5 + 5.5 * math.sqrt(p["steps"] / most),
                    fill=colours[line["label"]], fill_opacity=0.6, data_policy=line["label"], data_size=p["size"],
                    data_steps=p["steps"], data_value=fmt(p["tau"]))
    svg.legend([(line["label"], colours[line["label"]]) for line in series] + [("area ∝ steps", "#ffffff")], y=36)
    return svg.render("tau-vs-tree-size")


def cost_chart(report: BenchReport) -> str:
    data = cost_series(report)
    svg = Svg("Target forward time of n tokens over one token", top=56)
    if data is None:
        svg.note("this run read no cost table (run `specscope profile`, then bench a cost-aware policy)")
        return svg.render("cost-curve")
    x0, x1, y0, y1 = svg.plot
    ns = data["ns"]
    x_scale = Log2(min(ns), max(ns), x0, x1)
    top = max(max(line["ratio"]) for line in data["lines"])
    y_scale = Linear(0, max(nice_ticks(0, top)), y0, y1)
    svg.x_axis(x_scale, log2_ticks(ns), "tokens in one forward (n, log scale)", tick_text=lambda t: str(int(t)))
    svg.y_axis(y_scale, nice_ticks(0, y_scale.high), "time(n) / time(1)")
    svg.add("line", x1=float(x0), y1=y_scale(1.0), x2=float(x1), y2=y_scale(1.0), stroke="#222", stroke_dasharray="4 3",
            class_="reference")
    legend = []
    for i, line in enumerate(data["lines"]):
        colour = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{'M' if k == 0 else 'L'}{fmt(x_scale(n))},{fmt(y_scale(r))}"
                        for k, (n, r) in enumerate(zip(ns, line["ratio"])))
        svg.add("path", d=path, fill="none", stroke=colour, stroke_width=2, data_context=line["context"])
        for n, r in zip(ns, line["ratio"]):
            svg.add("circle", cx=x_scale(n), cy=y_scale(r), r=2.5, fill=colour, data_n=n, data_value=fmt(r),
                    data_context=line["context"])
        legend.append((f"{line['context']} tokens cached", colour))
    legend.append((f"({data['source']} table; dashed: one token's time)", "#ffffff"))
    svg.legend(legend, y=36)
    return svg.render("cost-curve")


def batch_series(report: BenchReport) -> list[dict[str, Any]]:
    """[{label, points: [{batch, value}]}] per policy from the report's batch sweep, by batch size."""
    sweep = report.batch_sweep or []
    return [{"label": label, "points": sorted(({"batch": p.batch, "value": p.speedup_vs_ar} for p in sweep
                                               if p.policy == label and p.speedup_vs_ar is not None),
                                              key=lambda point: point["batch"])}
            for label in dict.fromkeys(p.policy for p in sweep)]


def speedup_vs_batch_chart(report: BenchReport) -> str:
    series = batch_series(report)
    colours = colour_of(report.results)
    svg = Svg("Speedup vs ar at the same batch, against batch size", top=56)
    x0, x1, y0, y1 = svg.plot
    sizes = sorted({p["batch"] for line in series for p in line["points"]})
    x_scale = Log2(min(sizes), max(sizes), x0, x1)
    top = max(p["value"] for line in series for p in line["points"])
    y_scale = Linear(0, max(nice_ticks(0, max(top, 1.0))), y0, y1)
    svg.x_axis(x_scale, log2_ticks(sizes), "requests per forward (batch, log scale)", tick_text=lambda t: str(int(t)))
    svg.y_axis(y_scale, nice_ticks(0, y_scale.high), "speedup vs ar (×)")
    svg.add("line", x1=float(x0), y1=y_scale(1.0), x2=float(x1), y2=y_scale(1.0), stroke="#222", stroke_dasharray="4 3",
            class_="reference")
    for line in series:
        colour = colours.get(line["label"], PALETTE[0])
        path = " ".join(f"{'M' if k == 0 else 'L'}{fmt(x_scale(p['batch']))},{fmt(y_scale(p['value']))}"
                        for k, p in enumerate(line["points"]))
        svg.add("path", d=path, fill="none", stroke=colour, stroke_width=2, data_policy=line["label"])
        for p in line["points"]:
            svg.add("circle", cx=x_scale(p["batch"]), cy=y_scale(p["value"]), r=3.0, fill=colour,
                    data_policy=line["label"], data_batch=p["batch"], data_value=fmt(p["value"]))
    svg.legend([(line["label"], colours.get(line["label"], PALETTE[0])) for line in series], y=36)
    return svg.render("speedup-vs-batch")


BATCH_CHART = ("speedup-vs-batch.svg", "Speedup vs ar against batch size")

DRAW = {"speedup.svg": speedup_chart, "tau-by-category.svg": tau_by_category_chart,
        "tau-vs-tree-size.svg": tau_vs_size_chart, "cost-curve.svg": cost_chart}


def write_plots(report: BenchReport, out_dir: str | Path) -> list[tuple[str, str]]:
    """Writes the four charts into `out_dir` (and the batch sweep's, where the report holds one of two sizes
    or more); returns (title, file name) pairs for results.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    charts = list(CHARTS)
    if len({point.batch for point in report.batch_sweep or []}) > 1:
        charts.append(BATCH_CHART)
    draw = {**DRAW, BATCH_CHART[0]: speedup_vs_batch_chart}
    for name, _ in charts:
        (out / name).write_text(draw[name](report), encoding="utf-8")
    return [(title, name) for name, title in charts]
