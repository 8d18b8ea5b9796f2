// The Lua headers, the script bodies and the TypeScript registry must agree on every script's KEYS.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { luaSources } from '../../src/redis/lua-scripts.generated.js';
import { scriptKeyCounts } from '../../src/redis/scripts.js';

const luaDir = join(import.meta.dirname, '..', '..', 'lua');
const files = readdirSync(luaDir, { recursive: true })
  .map((f) => String(f).replaceAll('\\', '/'))
  .filter((f) => f.endsWith('.lua') && !f.startsWith('includes/'));

/** The script as embedded: every `--- @include "<name>"` line replaced by lua/includes/<name>.lua, once. */
function expandIncludes(source: string, seen = new Set<string>()): string {
  return source.replace(/^--- @include "([\w-]+)"\n/gm, (_, name: string) => {
    if (seen.has(name)) return '';
    seen.add(name);
    return expandIncludes(readFileSync(join(luaDir, 'includes', `${name}.lua`), 'utf8'), seen);
  });
}

it('groups the scripts by primitive, and the registry lists exactly them', () => {
  expect(files.every((f) => f.includes('/'))).toBe(true);
  expect(Object.keys(scriptKeyCounts).sort()).toEqual(files.map((f) => f.replace(/\.lua$/, '')).sort());
});

function header(source: string): string {
  const match = /^--\[\[([\s\S]*?)\]\]/.exec(source);
  if (!match?.[1]) throw new Error('missing --[[ header ]]');
  return match[1];
}

function headerKeys(text: string): number | 'variadic' {
  // KEYS[1..n], or fixed keys and then KEYS[<k>..n].
  if (/KEYS\[\d+\.\.n\]/.test(text)) return 'variadic';
  const indexes = [...text.matchAll(/^\s*KEYS\[(\d+)\]/gm)].map((m) => Number(m[1]));
  indexes.forEach((value, i) => expect(value).toBe(i + 1));
  return indexes.length;
}

function bodyKeys(body: string): number | 'variadic' {
  // Indexed by a variable (KEYS[i], KEYS[nextKey + 1]), counted, or unpacked from.
  if (/KEYS\[[a-z]|#KEYS|unpack\(KEYS/.test(body)) return 'variadic';
  return Math.max(0, ...[...body.matchAll(/KEYS\[(\d+)\]/g)].map((m) => Number(m[1])));
}

describe.each(files)('lua/%s', (file) => {
  const source = readFileSync(join(luaDir, file), 'utf8');
  const name = file.replace(/\.lua$/, '') as keyof typeof luaSources;
  const text = header(source);
  const body = source.slice(source.indexOf(']]') + 2);

  it('has a header with purpose, KEYS, ARGV, returns and side effects', () => {
    expect(text.trim().split('\n')[0]).toMatch(new RegExp(`^${file.replace(/^.*\//, '').replace('.lua', '')}: `));
    expect(text).toMatch(/^\s*Returns$/m);
    expect(text).toMatch(/^\s*Side effects$/m);
    expect(text).toMatch(/^\s*ARGV/m);
  });

  it('agrees with the body and the registry on the number of keys', () => {
    expect(headerKeys(text)).toBe(bodyKeys(body));
    expect(scriptKeyCounts[name]).toBe(headerKeys(text));
  });

  it('binds KEYS and ARGV to named locals before using them', () => {
    const firstCode = body.split('\n').find((line) => line.trim() !== '');
    expect(firstCode).toMatch(/^local \w+ = (KEYS|ARGV|tonumber\(ARGV)/);
  });

  it('is embedded in the build with its includes expanded', () => {
    expect(luaSources[name].source).toBe(expandIncludes(source));
    expect(luaSources[name].source).not.toMatch(/@include/);
  });
});
