/** safetensors through MLX, checked against files written and read by Python's safetensors package. */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { MlxError, mx } from "../src/index.js";
import { describeMlx, oraclePython } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "runtime-mlx-io-"));

function python(code: string): string {
  const py = oraclePython();
  if (!py) throw new Error("needs Python with numpy and safetensors (set ANEMLL_PYTHON)");
  return execFileSync(py, ["-c", code], { encoding: "utf8" });
}

describeMlx("safetensors", () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("save then load round-trips arrays, dtypes and metadata; the write is atomic", () => {
    const file = join(dir, "weights.safetensors");
    mx.tidy(() => {
      mx.saveSafetensors(
        file,
        {
          "model.embed.weight": mx.array(
            Uint16Array.from([0x3f80, 0x4000, 0xbf80, 0x0000]),
            [2, 2],
            "bfloat16",
          ),
          "layers.0.A_log": mx.array(Float32Array.from([0.5, -1.25])),
          ids: mx.array([7, 8, 9], null, "int32"),
        },
        { format: "mlx", note: "runtime-mlx test" },
      );
    });
    expect(readdirSync(dir)).toEqual(["weights.safetensors"]); // no temp file left behind
    const { arrays, metadata } = mx.loadSafetensors(file);
    expect(metadata).toEqual({ format: "mlx", note: "runtime-mlx test" });
    expect(Object.keys(arrays).sort()).toEqual(["ids", "layers.0.A_log", "model.embed.weight"]);
    expect(arrays["model.embed.weight"].dtype).toBe("bfloat16");
    expect(Array.from(arrays["model.embed.weight"].toTypedArray() as Uint16Array)).toEqual([
      0x3f80, 0x4000, 0xbf80, 0,
    ]);
    expect(Array.from(arrays["layers.0.A_log"].toTypedArray() as Float32Array)).toEqual([0.5, -1.25]);
    expect(arrays.ids.toTypedArray()).toEqual(Int32Array.from([7, 8, 9]));

    // An independent reader (Python safetensors + numpy) sees the same tensors and metadata.
    const seen = JSON.parse(
      python(
        `import json; from safetensors import safe_open\n` +
          `f = safe_open(${JSON.stringify(file)}, "np")\n` +
          `print(json.dumps({"meta": f.metadata(), "A_log": f.get_tensor("layers.0.A_log").tolist(), "ids": f.get_tensor("ids").tolist()}))`,
      ),
    );
    expect(seen).toEqual({
      meta: { format: "mlx", note: "runtime-mlx test" },
      A_log: [0.5, -1.25],
      ids: [7, 8, 9],
    });
    mx.dispose(arrays);
  });

  it("loads a file written by Python's safetensors (bf16 included)", () => {
    const file = join(dir, "from-python.safetensors");
    python(
      `import numpy as np; from safetensors.numpy import save_file\n` +
        `x = np.arange(12, dtype=np.float32).reshape(3, 4) / 8\n` +
        `b = (x.view(np.uint32) >> 16).astype(np.uint16)\n` +
        `save_file({"x": x, "i": np.array([[1, -2]], dtype=np.int64)}, ${JSON.stringify(file)}, metadata={"k": "v"})\n` +
        `open(${JSON.stringify(`${file}.bits`)}, "w").write(",".join(map(str, b.reshape(-1).tolist())))`,
    );
    const { arrays, metadata } = mx.loadSafetensors(file);
    expect(metadata).toEqual({ k: "v" });
    expect(arrays.x.shape).toEqual([3, 4]);
    expect(Array.from(arrays.x.toTypedArray() as Float32Array)).toEqual(
      Array.from({ length: 12 }, (_, i) => i / 8),
    );
    expect(arrays.i.dtype).toBe("int64");
    expect(Array.from(arrays.i.toTypedArray() as BigInt64Array)).toEqual([1n, -2n]);
    mx.dispose(arrays);
  });

  it("a missing or corrupt file is an MlxError naming the problem", () => {
    expect(() => mx.loadSafetensors(join(dir, "missing.safetensors"))).toThrow(MlxError);
    const bad = join(dir, "bad.safetensors");
    writeFileSync(bad, Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3]));
    expect(() => mx.loadSafetensors(bad)).toThrow(MlxError);
  });

  it("saving a disposed array fails with the tensor name and writes nothing", () => {
    const a = mx.ones([2]);
    a.dispose();
    const target = join(dir, "never.safetensors");
    expect(() => mx.saveSafetensors(target, { "layer.w": a })).toThrow(/tensor 'layer.w'/);
    expect(readdirSync(dir).some((f) => f.startsWith(".never") || f === "never.safetensors")).toBe(false);
  });
});
