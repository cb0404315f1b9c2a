/** tidy / keep / dispose, checked through MLX's own active-memory counter. */
import { execFileSync } from "node:child_process";
import { expect, it } from "vitest";
import { addonPath, type MxArray, mx } from "../src/index.js";
import { describeMlx } from "./helpers.js";

const MB = 1 << 20;

describeMlx("lifetime: tidy, keep, dispose", () => {
  it("tidy releases what it does not return (active memory goes back)", () => {
    mx.synchronize();
    const before = mx.getActiveMemory();
    const kept = mx.tidy(() => {
      const a = mx.ones([256, 1024]); // 1 MiB each once evaluated
      const b = mx.multiply(a, 2);
      const c = mx.add(b, 1);
      const d = mx.sum(c, 1);
      mx.eval(a, b, c, d);
      expect(mx.getActiveMemory() - before).toBeGreaterThanOrEqual(3 * MB);
      return { d };
    });
    mx.synchronize();
    expect(kept.d.disposed).toBe(false);
    expect(kept.d.shape).toEqual([256]);
    const after = mx.getActiveMemory();
    expect(after - before).toBeLessThan(64 * 1024); // only d (1 KiB) remains
    kept.d.dispose();
    mx.synchronize();
    expect(mx.getActiveMemory()).toBeLessThanOrEqual(before);
  });

  it("tidy disposes every intermediate handle, and the returned tree survives", () => {
    let inner: MxArray[] = [];
    const out = mx.tidy(() => {
      const a = mx.array([1, 2, 3]);
      const b = mx.exp(a);
      const parts = mx.split(mx.concatenate([a, b]), 2);
      inner = [a, b, ...parts];
      return [parts[1], new Map([["x", a]])] as const;
    });
    expect(inner[0].disposed).toBe(false); // returned inside the Map
    expect(inner[1].disposed).toBe(true);
    expect(inner[2].disposed).toBe(true);
    expect(inner[3].disposed).toBe(false);
    mx.dispose(out);
    expect(inner.every((a) => a.disposed)).toBe(true);
  });

  it("nested scopes hand survivors to the enclosing scope", () => {
    let survivor: MxArray | undefined;
    let innerTemp: MxArray | undefined;
    const result = mx.tidy(() => {
      survivor = mx.tidy(() => {
        innerTemp = mx.zeros([2]);
        return mx.add(innerTemp, 1);
      });
      expect(innerTemp!.disposed).toBe(true);
      expect(survivor.disposed).toBe(false);
      return mx.sum(survivor).item();
    });
    expect(result).toBe(2);
    expect(survivor!.disposed).toBe(true); // not returned by the outer scope
  });

  it("keep() exempts arrays stored outside the return value", () => {
    const cache: { k?: MxArray } = {};
    mx.tidy(() => {
      cache.k = mx.keep(mx.ones([4]));
      mx.zeros([4]);
    });
    expect(cache.k!.disposed).toBe(false);
    cache.k!.dispose();
  });

  it("a throwing scope still releases its arrays", () => {
    let temp: MxArray | undefined;
    expect(() =>
      mx.tidy(() => {
        temp = mx.ones([3]);
        throw new Error("boom");
      }),
    ).toThrow("boom");
    expect(temp!.disposed).toBe(true);
  });

  it("async tidy waits for the promise and keeps concurrent scopes apart", async () => {
    const made: Record<string, MxArray[]> = { a: [], b: [] };
    const run = (name: "a" | "b", delay: number) =>
      mx.tidy(async () => {
        made[name].push(mx.ones([2]));
        await new Promise((resolve) => setTimeout(resolve, delay));
        made[name].push(mx.ones([2]));
        const y = mx.multiply(made[name][0], made[name][1]);
        await mx.asyncEval(y);
        return y;
      });
    const [ya, yb] = await Promise.all([run("a", 20), run("b", 5)]);
    expect(made.a.every((x) => x.disposed)).toBe(true);
    expect(made.b.every((x) => x.disposed)).toBe(true);
    expect(ya.disposed).toBe(false);
    expect(yb.disposed).toBe(false);
    expect(Array.from(ya.toTypedArray() as Float32Array)).toEqual([1, 1]);
    mx.dispose([ya, yb]);
  });

  it("memory stays flat over 1,000 small decode-like steps inside tidy", () => {
    let state = mx.zeros([64, 64]);
    const w = mx.full([64, 64], 1 / 64);
    const step = () => {
      const next = mx.tidy(() => mx.add(mx.matmul(state, w), mx.softmax(mx.ones([64, 64]), -1)));
      mx.eval(next);
      state.dispose();
      state = next;
    };
    for (let i = 0; i < 50; i++) step(); // warm the allocator cache
    mx.synchronize();
    const start = mx.getActiveMemory();
    const objectsBefore = start;
    for (let i = 0; i < 1000; i++) step();
    mx.synchronize();
    const end = mx.getActiveMemory();
    expect(end).toBe(objectsBefore);
    // Each step's state stays finite and converges: state = state @ w + 1/64 everywhere.
    const values = state.toTypedArray() as Float32Array;
    expect(Number.isFinite(values[0])).toBe(true);
    mx.dispose([state, w]);
  });

  it("the GC finalizer releases arrays nobody disposed (backstop)", () => {
    // A fresh process with --expose-gc: 8 MiB of unreferenced arrays must go once collected.
    const script = `
      const m = require(${JSON.stringify(addonPath())});
      (async () => {
        const base = m.getActiveMemory();
        (() => { for (let i = 0; i < 8; i++) m.eval([m.full([256, 1024], i, "float32")]); })();
        const held = m.getActiveMemory() - base;
        for (let i = 0; i < 5; i++) { global.gc(); await new Promise((r) => setImmediate(r)); }
        m.synchronize();
        console.log(JSON.stringify({ held, after: m.getActiveMemory() - base }));
      })();`;
    const out = JSON.parse(
      execFileSync(process.execPath, ["--expose-gc", "-e", script], { encoding: "utf8" }),
    );
    expect(out.held).toBe(8 * MB);
    expect(out.after).toBe(0);
  });
});
