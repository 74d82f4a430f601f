// Small charts drawn as SVG.

import { el, svgEl } from "./dom.js";

/** A small bar chart, one bar per step, with its maximum labelled. */
export function barChart(title, values, kind, { width = 220, height = 44, onPick = null } = {}) {
  const figure = el("figure", { class: `chart ${kind}` });
  const max = Math.max(1, ...values);
  figure.append(el("figcaption", {}, `${title} (max ${values.length ? Math.max(...values) : 0})`));
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  const barWidth = values.length ? Math.max(1, Math.min(12, width / values.length)) : 0;
  values.forEach((value, i) => {
    const barHeight = (value / max) * (height - 2);
    const bar = svgEl("rect", { x: i * barWidth, y: height - barHeight, width: Math.max(1, barWidth - 1), height: barHeight });
    svg.append(bar);
    // A full-height target per step, so a step with a tiny bar can still be picked.
    const hit = svgEl("rect", { x: i * barWidth, y: 0, width: barWidth, height, class: "hit" });
    hit.append(svgEl("title", {}, `step ${i + 1}: ${value}${onPick ? " (click to show its tree)" : ""}`));
    if (onPick) hit.addEventListener("click", () => onPick(i));
    svg.append(hit);
  });
  figure.append(svg);
  return figure;
}
