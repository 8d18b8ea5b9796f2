/** The repository's root directory. */
export declare const root: string;
/** One ```ts / ```typescript block of README.md or docs/**\/*.md. */
export interface CodeBlock {
  /** The Markdown file, relative to the repository. */
  file: string;
  /** The line of its opening fence (1-based). */
  line: number;
  /** The words after the language in the info string: `run`, `no-check`. */
  flags: string[];
  code: string;
}
export declare function codeBlocks(): CodeBlock[];
