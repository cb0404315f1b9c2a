/**
 * What a component keeps between steps, as the protocol sees it: protocol.ts resets, copies and
 * restores it; each backend implements it (state.ts's HostState for host memory).
 */

/** What a component keeps between steps (see ChainComponent.newState); the protocol resets and copies it. */
export interface ChainComponentState {
  /** Zeroes every kept buffer (sequence start); ordered before the next predict(). */
  reset(): void;
  /**
   * A copy of every kept buffer (KV caches: rows [0, rows), the others are zeros), taken after the
   * predictions asked for before.
   */
  snapshot(rows: number): Promise<ComponentSnapshot>;
  /** Puts a snapshot of a state of the same plan back, before the predictions asked for after. */
  restore(snapshot: ComponentSnapshot): Promise<void>;
  /**
   * Makes row `row` of the last verify's per-row GDN states (rowStatePairs) the kept states, after
   * the predictions asked for before: the commit of an accepted verify row before a function
   * without `select` (decode, prefill) runs. `kvRows`: the KV rows written so far (a backend that
   * copies the whole state through the host keeps those).
   */
  selectRow(row: number, kvRows: number): Promise<void>;
}

/** A copy of one component's state; `bytes` is what it holds. */
export interface ComponentSnapshot {
  readonly bytes: number;
}
