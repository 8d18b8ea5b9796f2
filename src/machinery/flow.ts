/**
 * Flows: the unit of lock ownership. A flow is an AsyncLocalStorage context; everything that runs inside
 * it, awaited or not, belongs to it. A flow started inside another is its child, and re-entering a lock
 * that the flow or any ancestor holds is reentrant. Flows are never bound with `enterWith`: that would
 * leak ownership into sibling tasks started from the same synchronous caller.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

export interface Flow {
  readonly id: number;
  readonly parent: Flow | undefined;
}

interface FlowRegistry {
  readonly storage: AsyncLocalStorage<Flow>;
  nextId: number;
}

// One registry per process, even when the ESM and the CommonJS builds are both loaded, so that a flow
// started through one is seen through the other and flow ids never repeat.
const registryKey = Symbol.for('flowlock.flows');
const registry: FlowRegistry = ((globalThis as Record<symbol, unknown>)[registryKey] as FlowRegistry | undefined) ?? {
  storage: new AsyncLocalStorage<Flow>(),
  nextId: 1,
};
(globalThis as Record<symbol, unknown>)[registryKey] = registry;

export function currentFlow(): Flow | undefined {
  return registry.storage.getStore();
}

/** A new flow, child of the current one; not entered. */
export function newFlow(): Flow {
  return { id: registry.nextId++, parent: currentFlow() };
}

/** Runs `fn` in a new child flow of the current one. */
export function runInNewFlow<T>(fn: () => T): T {
  return registry.storage.run(newFlow(), fn);
}

/** Owner ids of `flow` and its ancestors, nearest first. */
export function ownerChain(clientId: string, flow: Flow): string[] {
  const owners: string[] = [];
  for (let f: Flow | undefined = flow; f !== undefined; f = f.parent) owners.push(`${clientId}:${f.id}`);
  return owners;
}

/**
 * Runs `fn` outside every flow. Timers and event listeners run in the flow that was current when they were
 * created or fired: the library's own timers and loss notifications must not lend a caller's flow (and its
 * holds) to a listener that has none.
 */
export function outsideFlows<T>(fn: () => T): T {
  return registry.storage.exit(fn);
}

/** Runs `fn` in `flow` (an existing flow, such as one a lease owns), not in a new one. */
export function runInFlow<T>(flow: Flow, fn: () => T): T {
  return registry.storage.run(flow, fn);
}
