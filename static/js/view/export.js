// Export: what the screen shows (the tree as the camera frames it, the caption, the theory panel) as
// one standalone SVG, or as a PNG drawn from that SVG; and the run itself as a trace file.

import { svgEl } from "./dom.js";

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * A standalone SVG of the current view. `tree` is the TreeView, `caption` { title, text }, `panel`
 * the theory panel element shown. Styles are copied in, so the file looks as the page does.
 */
export function composeSvg({ tree, caption, panel }) {
  const visible = tree.visibleBox();
  const width = Math.max(Math.round(visible.width), 900);
  const out = svgEl("svg", { width, class: "export" });
  const style = document.createElementNS(SVG_NS, "style");
  style.textContent = pageCss();
  out.append(style, svgEl("rect", { x: 0, y: 0, width: "100%", height: "100%", class: "export-page" }));

  // The tree as framed now: the camera's contents under a viewBox of the visible part.
  const frame = svgEl("svg", { x: 0, y: 0, width: Math.round(visible.width), height: Math.round(visible.height),
                               viewBox: `${visible.x} ${visible.y} ${visible.w} ${visible.h}`, class: "tree" });
  const scene = tree.camera.cloneNode(true);
  scene.removeAttribute("transform");
  scene.removeAttribute("class");
  for (const node of scene.querySelectorAll(".entering")) node.classList.remove("entering");
  frame.append(scene);
  out.append(svgEl("rect", { x: 0, y: 0, width: Math.round(visible.width), height: Math.round(visible.height), class: "export-frame" }), frame);

  let y = Math.round(visible.height) + 36;
  out.append(svgEl("text", { x: 16, y, class: "export-title" }, caption.title));
  y += 8;
  for (const line of wrap(caption.text, Math.floor((width - 32) / 10))) {
    y += 26;
    out.append(svgEl("text", { x: 16, y, class: "export-caption" }, line));
  }
  y += 24;
  for (const block of panelBlocks(panel)) {
    if (block.svg) {
      const copy = block.svg.cloneNode(true);
      copy.setAttribute("x", "16");
      copy.setAttribute("y", String(y));
      out.append(copy);
      y += Number(block.svg.getAttribute("height")) + 12;
    } else {
      for (const line of wrap(block.text, Math.floor((width - 32) / 8.5))) {
        y += 22;
        out.append(svgEl("text", { x: 16, y, class: "export-panel" }, line));
      }
      y += 8;
    }
  }
  out.setAttribute("height", String(y + 16));
  out.setAttribute("viewBox", `0 0 ${width} ${y + 16}`);
  return new XMLSerializer().serializeToString(out);
}

/** The theory panel as blocks: its drawings as they are, its tables and notes as lines of text. */
function panelBlocks(panel) {
  const blocks = [];
  for (const child of panel?.children ?? []) {
    if (child.tagName.toLowerCase() === "svg") blocks.push({ svg: child });
    else if (child.tagName.toLowerCase() === "table") {
      for (const row of child.rows) blocks.push({ text: [...row.cells].map((c) => c.textContent).join("  ·  ") });
    } else if (child.textContent.trim()) {
      blocks.push({ text: [...child.childNodes].map((n) => n.textContent.trim()).filter(Boolean).join("  ") });
    }
  }
  return blocks;
}

function wrap(text, width) {
  const lines = [];
  let line = "";
  for (const word of String(text ?? "").split(/\s+/)) {
    if (line && (line + " " + word).length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line ? `${line} ${word}` : word;
    }
  }
  if (line) lines.push(line);
  return lines;
}

/** The page's own style rules (same origin), with the export's few additions. */
function pageCss() {
  const rules = [];
  for (const sheet of document.styleSheets) {
    try {
      for (const rule of sheet.cssRules) rules.push(rule.cssText);
    } catch {
      // A stylesheet from another origin cannot be read; the page has none.
    }
  }
  rules.push(`.export-page { fill: #ffffff; } .export-frame { fill: #fcfdfe; stroke: #d9dee5; }
    .export text { font-family: system-ui, sans-serif; fill: #1d2330; }
    .export .export-title { font-size: 20px; font-weight: 700; } .export .export-caption { font-size: 18px; }
    .export .export-panel { font-size: 15px; }
    svg.tree text { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; }
    .chart-export .chart-export-title { font-size: 15px; font-weight: 600; } .chart-export .chart-export-legend { font-size: 11px; }`);
  return rules.join("\n");
}

/** PNG of an SVG string, at `scale` device pixels per CSS pixel. */
export async function svgToPng(svgText, scale = 2) {
  const url = URL.createObjectURL(new Blob([svgText], { type: "image/svg+xml" }));
  try {
    const image = new Image();
    await new Promise((resolve, reject) => {
      image.onload = resolve;
      image.onerror = () => reject(new Error("the view could not be drawn as an image"));
      image.src = url;
    });
    const canvas = document.createElement("canvas");
    canvas.width = Math.round(image.width * scale);
    canvas.height = Math.round(image.height * scale);
    const context = canvas.getContext("2d");
    context.scale(scale, scale);
    context.drawImage(image, 0, 0);
    return await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** The run's events as a trace file: one JSON event per line, as the engine writes them. */
export function traceText(events) {
  return events.map((event) => JSON.stringify(event)).join("\n") + "\n";
}

export function download(name, data, type) {
  const blob = data instanceof Blob ? data : new Blob([data], { type });
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/**
 * One chart figure (view/charts.js's frame) as a standalone SVG: its title and legend drawn above the
 * chart, its caption below, the page's styles copied in, so the file reads without the page.
 */
export function chartSvgText(figure) {
  const chart = figure.querySelector("svg.chart-svg");
  const [, , width, height] = chart.getAttribute("viewBox").split(/\s+/).map(Number);
  const out = svgEl("svg", { width, class: "export chart-export" });
  const style = document.createElementNS(SVG_NS, "style");
  style.textContent = pageCss();
  out.append(style, svgEl("rect", { x: 0, y: 0, width: "100%", height: "100%", class: "export-page" }));
  out.append(svgEl("text", { x: 8, y: 20, class: "chart-export-title" }, figure.querySelector("figcaption")?.textContent ?? ""));
  let x = 8;
  let y = 40;
  for (const item of figure.querySelectorAll(".chart-legend li")) {
    const label = item.textContent;
    const itemWidth = 20 + 6.6 * label.length;
    if (x > 8 && x + itemWidth > width - 8) {
      x = 8;
      y += 18;
    }
    out.append(svgEl("rect", { x, y: y - 9, width: 10, height: 10, fill: item.querySelector("rect, circle")?.getAttribute("fill") }),
               svgEl("text", { x: x + 14, y, class: "chart-export-legend" }, label));
    x += itemWidth;
  }
  // The chart's marks in a group, not a nested <svg>: the page sizes .chart-svg by CSS (width 100%), the file must not.
  const marks = svgEl("g", { class: "chart-svg", transform: `translate(0 ${y + 10})` });
  for (const child of chart.childNodes) marks.append(child.cloneNode(true));
  out.append(marks);
  let bottom = y + 10 + height;
  for (const line of wrap(figure.querySelector(".chart-caption")?.textContent ?? "", Math.floor((width - 16) / 6.6))) {
    bottom += 16;
    out.append(svgEl("text", { x: 8, y: bottom, class: "chart-export-legend" }, line));
  }
  out.setAttribute("height", String(bottom + 10));
  out.setAttribute("viewBox", `0 0 ${width} ${bottom + 10}`);
  return new XMLSerializer().serializeToString(out);
}
