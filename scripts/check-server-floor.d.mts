/** One thing the server-floor check found: where, and what. */
export interface Finding {
  readonly file: string;
  readonly line: number;
  readonly message: string;
}
/** A gate that keeps a form above the floor off older servers (scripts/server-floor/commands.mjs). */
export interface Gate {
  readonly file: string;
  readonly contains: string;
  readonly says: string;
}
export interface CheckOptions {
  readonly floor?: string;
  readonly gateHolds?: (gate: Gate) => boolean;
  /** Called with `file:line` and the form of every command the check classified (or could not). */
  readonly onForm?: (
    at: string,
    form: { readonly form: string; readonly since?: string; readonly unknown?: string },
  ) => void;
}
/** Findings of the Lua files (paths under lua/, includes under lua/includes/), read with `readFile`. */
export declare function checkLua(
  files: readonly string[],
  readFile: (path: string) => string,
  options?: CheckOptions,
): Finding[];
/** Findings of the TypeScript files (paths under src/), read with `readFile`. */
export declare function checkTypeScript(
  files: readonly string[],
  readFile: (path: string) => string,
  options?: CheckOptions,
): Finding[];
/** Whether the gate is still in its file. */
export declare function gateHolds(gate: Gate, readFile?: (path: string) => string): boolean;
export declare function compareVersions(a: string, b: string): number;
/** Every Lua and TypeScript file the CI check reads (paths relative to the repository). */
export declare function repositoryFiles(): { lua: string[]; typescript: string[]; readFile: (path: string) => string };
