import { describe, expect, it } from "vitest";
import { QueueFullError, RequestAbortedError } from "../src/errors.js";
import { ModelQueue } from "../src/queue.js";

describe("ModelQueue", () => {
  it("grants turns first come, first served", async () => {
    const q = new ModelQueue("m", 8);
    const order: number[] = [];
    const first = await q.acquire();
    const waiting = [1, 2, 3].map((i) =>
      q.acquire().then((release) => {
        order.push(i);
        release();
      }),
    );
    expect(q.waiting).toBe(3);
    expect(q.busy).toBe(true);
    first();
    await Promise.all(waiting);
    expect(order).toEqual([1, 2, 3]);
    expect(q.busy).toBe(false);
    expect(q.waiting).toBe(0);
  });

  it("refuses when the line is full, with a Retry-After of at least a second", async () => {
    const q = new ModelQueue("m", 1);
    const release = await q.acquire();
    const second = q.acquire();
    const err = await q.acquire().catch((e) => e);
    expect(err).toBeInstanceOf(QueueFullError);
    expect(err.status).toBe(429);
    expect(Number(err.headers["retry-after"])).toBeGreaterThanOrEqual(1);
    release();
    (await second)();
    // capacity 0: only the running request, nobody waits
    const solo = new ModelQueue("m", 0);
    const r = await solo.acquire();
    await expect(solo.acquire()).rejects.toBeInstanceOf(QueueFullError);
    r();
    (await solo.acquire())();
  });

  it("lets an aborted waiter leave the line without taking a turn", async () => {
    const q = new ModelQueue("m", 4);
    const release = await q.acquire();
    const ac = new AbortController();
    const gone = q.acquire(ac.signal);
    const next = q.acquire();
    ac.abort();
    await expect(gone).rejects.toBeInstanceOf(RequestAbortedError);
    expect(q.waiting).toBe(1);
    release();
    release(); // a second release is ignored, not a second turn handed out
    const r = await next;
    expect(q.busy).toBe(true);
    r();
    expect(q.busy).toBe(false);
  });

  it("bases Retry-After on the line ahead and how long turns take", async () => {
    const q = new ModelQueue("m", 8);
    const release = await q.acquire();
    const waiters = Array.from({ length: 5 }, () => q.acquire());
    // No history yet: a turn is assumed to take a second; six turns are ahead.
    expect(q.retryAfterSeconds()).toBe(6);
    release();
    for (const w of waiters) (await w)(); // five turns of ~0 ms
    const r = await q.acquire();
    expect(q.retryAfterSeconds()).toBe(1); // 1000 ms × 0.8^6 ≈ 0.26 s ahead → the 1 s floor
    r();
  });
});
