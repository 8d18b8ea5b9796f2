/**
 * The ACL rules of docs/where-it-runs.md, as the tests apply them: each ```text block under the heading
 * "ACL rules" holds `ACL SETUSER` lines, each group of lines after a comment `# Redis X.Y and later ...`
 * applying to servers of that version and later, or `# Redis X.Y to A.B ...` to the versions between (Valkey reports `redis_version:7.2.4`, and so takes every
 * group up to 7.2). The tests run these lines as written, so the page cannot drift from what was tested.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const PAGE = fileURLToPath(new URL('../../docs/where-it-runs.md', import.meta.url));

export interface AclLine {
  /** The first server version (`[major, minor]`) the line is for. */
  readonly since: readonly [number, number];
  /** The last server version the line is for, if not every later one. */
  readonly until?: readonly [number, number];
  /** The line's words after `ACL`: `SETUSER <user> ...`. */
  readonly args: readonly string[];
}

/** Every `ACL SETUSER` line of the page for `user`, with the version its group is for. */
export function aclLines(user: string): AclLine[] {
  const lines: AclLine[] = [];
  let since: [number, number] | undefined;
  let until: [number, number] | undefined;
  let inBlock = false;
  for (const line of readFileSync(PAGE, 'utf8').split('\n')) {
    if (line.startsWith('```')) {
      inBlock = !inBlock && line.trim() === '```text';
      since = undefined;
      continue;
    }
    if (!inBlock) continue;
    const version = /^# Redis (\d+)\.(\d+) (?:and later|to (\d+)\.(\d+))/.exec(line);
    if (version) {
      since = [Number(version[1]), Number(version[2])];
      until = version[3] === undefined ? undefined : [Number(version[3]), Number(version[4])];
      continue;
    }
    const words = line.trim().split(/\s+/);
    if (words[0] !== 'ACL' || words[1] !== 'SETUSER' || words[2] !== user) continue;
    if (!since) throw new Error(`docs/where-it-runs.md: "${line}" has no "# Redis X.Y and later" comment above it`);
    lines.push({ since, ...(until ? { until } : {}), args: words.slice(1) });
  }
  if (lines.length === 0) throw new Error(`docs/where-it-runs.md has no ACL SETUSER line for ${user}`);
  return lines;
}

/** The server's version as `redis_version` reports it, from an INFO reply. */
export function serverVersion(info: string): [number, number] {
  const match = /^redis_version:(\d+)\.(\d+)/m.exec(info);
  if (!match) throw new Error('INFO has no redis_version');
  return [Number(match[1]), Number(match[2])];
}

/** The lines of `user` that a server of `version` takes. */
export function aclLinesFor(user: string, version: readonly [number, number]): AclLine[] {
  const atLeast = (a: readonly [number, number], b: readonly [number, number]): boolean =>
    a[0] > b[0] || (a[0] === b[0] && a[1] >= b[1]);
  return aclLines(user).filter(({ since, until }) => atLeast(version, since) && (!until || atLeast(until, version)));
}

/** The commands (`+name`, lower case, subcommands as `name|sub`) that `user`'s lines grant. */
export function grantedCommands(user: string): Set<string> {
  return new Set(
    aclLines(user)
      .flatMap(({ args }) => args)
      .filter((word) => word.startsWith('+') && !word.startsWith('+@'))
      .map((word) => word.slice(1).toLowerCase()),
  );
}
