/**
 * Per-package timing without touching runtime-ane: a Backend that wraps another and times every
 * component's load and every predict() the chain runner makes. The chain loop itself is unchanged,
 * so what is measured is exactly what a user's decode pays per package (host → predict → host).
 */
import type { Backend, LoadedComponent } from "@anemll-qwen35/runtime-ane";

export interface PredictEvent {
  readonly component: string;
  readonly ms: number;
}

export class ComponentTimer {
  /** Load (and, on Core ML, compile) time per component, in load order. */
  readonly loads: { component: string; ms: number }[] = [];
  private events: PredictEvent[] = [];

  recordLoad(component: string, ms: number): void {
    this.loads.push({ component, ms });
  }

  recordPredict(component: string, ms: number): void {
    this.events.push({ component, ms });
  }

  /** The predict events since the last take() (one decode step, when called after each step). */
  take(): PredictEvent[] {
    const out = this.events;
    this.events = [];
    return out;
  }
}

export function timedBackend(inner: Backend, timer: ComponentTimer): Backend {
  return {
    name: inner.name,
    transfers: () => inner.transfers(),
    functionCheck: inner.functionCheck, // the prefill check sees the packages, not the timer
    async load(packagePath, options): Promise<LoadedComponent> {
      const t0 = performance.now();
      const loaded = await inner.load(packagePath, options);
      timer.recordLoad(options.name, performance.now() - t0);
      return {
        newState: (plan) => loaded.newState(plan),
        async predict(inputs, state, position) {
          const t = performance.now();
          const out = await loaded.predict(inputs, state, position);
          timer.recordPredict(options.name, performance.now() - t);
          return out;
        },
        dispose: () => loaded.dispose(),
      };
    },
  };
}
