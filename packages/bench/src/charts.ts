/**
 * Charts: Vega-Lite specs compiled with vega-lite, rendered headless by vega to SVG (no canvas
 * needed), and the SVG rasterised to PNG by resvg (a prebuilt binary from npm). Bars for configs
 * side by side, lines for sweeps; every spec is built from a result's rows alone.
 */
import { join } from "node:path";
import { writeFileAtomic } from "@anemll-qwen35/ir/checkpoint";
import { Resvg } from "@resvg/resvg-js";
import * as vega from "vega";
import { compile, type TopLevelSpec } from "vega-lite";

/** Fonts present on macOS and on Debian-like Linux; resvg takes the first it finds. */
const FONT = "Helvetica, Arial, DejaVu Sans, Liberation Sans, sans-serif";

export type Row = Record<string, string | number>;

export interface BarChart {
  readonly kind: "bar";
  readonly name: string;
  readonly title: string;
  readonly rows: readonly Row[];
  /** Category on the x axis. */
  readonly x: string;
  readonly y: string;
  readonly yTitle: string;
  /** Colour (and side-by-side offset) by this field. */
  readonly color?: string;
  /** Error bar fields (p10/p90 or min/max) when present. */
  readonly lo?: string;
  readonly hi?: string;
}

export interface LineChart {
  readonly kind: "line";
  readonly name: string;
  readonly title: string;
  readonly rows: readonly Row[];
  readonly x: string;
  readonly xTitle: string;
  /** "quantitative" for numbers such as ctx, "ordinal" for 1, 2, 3, all. */
  readonly xType: "quantitative" | "ordinal";
  readonly y: string;
  readonly yTitle: string;
  readonly color?: string;
  readonly lo?: string;
  readonly hi?: string;
}

export type ChartSpec = BarChart | LineChart;

export function vegaLiteSpec(c: ChartSpec): TopLevelSpec {
  const color = c.color ? { color: { field: c.color, type: "nominal" as const } } : {};
  const base = {
    $schema: "https://vega.github.io/schema/vega-lite/v5.json",
    title: c.title,
    data: { values: c.rows as Row[] },
    width: c.kind === "bar" ? 360 : 420,
    height: 240,
    // vega measures text without a canvas (an estimate); the padding keeps legends inside the PNG
    padding: { left: 8, top: 8, right: 32, bottom: 8 },
    config: { font: FONT, view: { stroke: "transparent" } },
  };
  const band = c.lo && c.hi;
  if (c.kind === "bar") {
    // sort: null keeps the scenario's order of runs
    const x = {
      field: c.x,
      type: "nominal" as const,
      title: null,
      sort: null,
      axis: { labelAngle: -30, labelLimit: 400 },
    };
    const offset = c.color ? { xOffset: { field: c.color } } : {};
    const y = { field: c.y, type: "quantitative" as const, title: c.yTitle };
    const layers: object[] = [
      { mark: { type: "bar" }, encoding: { x, y, ...color, ...offset, tooltip: [{ field: c.y }] } },
    ];
    if (band) {
      layers.push({
        mark: { type: "rule", color: "black" },
        encoding: {
          x,
          ...offset,
          y: { field: c.lo, type: "quantitative", title: c.yTitle },
          y2: { field: c.hi },
        },
      });
    }
    return { ...base, layer: layers } as TopLevelSpec;
  }
  const x = { field: c.x, type: c.xType, title: c.xTitle, sort: null, axis: { labelAngle: 0 } };
  const y = { field: c.y, type: "quantitative" as const, title: c.yTitle, scale: { zero: false } };
  const layers: object[] = [{ mark: { type: "line", point: true }, encoding: { x, y, ...color } }];
  if (band) {
    layers.push({
      mark: { type: "errorbar" },
      encoding: {
        x,
        y: { field: c.lo, type: "quantitative", title: c.yTitle },
        y2: { field: c.hi },
        ...color,
      },
    });
  }
  return { ...base, layer: layers } as TopLevelSpec;
}

export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: "none" });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

export function svgToPng(svg: string, scale = 2): Buffer {
  const r = new Resvg(svg, {
    background: "white",
    fitTo: { mode: "zoom", value: scale },
    font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans" },
  });
  return r.render().asPng();
}

/**
 * Writes `<prefix>-<name>.vl.json`, `.svg` and `.png` into `dir` (atomically); returns the file
 * names written.
 */
export async function writeChart(dir: string, prefix: string, c: ChartSpec): Promise<string[]> {
  const spec = vegaLiteSpec(c);
  const svg = await renderSvg(spec);
  const png = svgToPng(svg);
  const stem = `${prefix}-${c.name}`;
  await writeFileAtomic(join(dir, `${stem}.vl.json`), `${JSON.stringify(spec, null, 2)}\n`);
  await writeFileAtomic(join(dir, `${stem}.svg`), svg);
  await writeFileAtomic(join(dir, `${stem}.png`), png);
  return [`${stem}.vl.json`, `${stem}.svg`, `${stem}.png`];
}
