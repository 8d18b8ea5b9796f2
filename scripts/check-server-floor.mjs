// The static server-floor check (`npm run check:floor`, a CI step): every command form the library sends,
// from the Lua scripts under lua/ and from the TypeScript under src/, against the table of command forms in
// scripts/server-floor/commands.mjs (the first Redis version that accepts each, from the command reference's
// history). It fails, naming file:line, on
//   - a form whose first version is above the declared floor (unless the table names the gate that keeps it
//     off older servers, and that gate is still where the table says);
//   - a command or form the table does not know, or cannot be read statically (a command name or an option
//     that is not a literal): a new command forces an entry in the table;
//   - in Lua, a key argument (by the table's key positions) or a PUBLISH/SPUBLISH channel that is not taken
//     from KEYS: Redis refuses undeclared keys during a slot migration, Dragonfly and ElastiCache Serverless
//     always do.
//
// What "taken from KEYS" means here (a small data-flow analysis over each script with its includes
// expanded, names resolved without scopes, so a name defined twice must be a key both times):
//   KEYS[i]; a local or an assignment whose value is one; a function parameter whose every call site passes
//   one; a field of a table constructor, or an element of a table built from KEYS (`{unpack(KEYS, 2)}`,
//   `ipairs(keys)`), that is one; the value of a local function whose every `return` is one; either value of
//   `cond and a or b` when both are. Anything else is not: a concatenation (`..`), a reply of redis.call,
//   ARGV, a literal, a string function's result, a loop counter.
//
// Usage: node scripts/check-server-floor.mjs [--verbose]   (exit 1 on any finding)
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { CLIENT_METHODS, COMMANDS, CONTAINERS, FLOOR, NOT_COMMANDS } from './server-floor/commands.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

// ---------------------------------------------------------------------------------------------------------
// Versions and forms

/** -1, 0, 1 as version `a` is older than, the same as, or newer than `b` ('6.2.0'). */
export function compareVersions(a, b) {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

const maxVersion = (versions) => versions.reduce((a, b) => (compareVersions(a, b) >= 0 ? a : b));

/**
 * The form of one command call and the first version that accepts it. `name`: the command as written (any
 * case); `args`: each argument as `{ lit: 'text' }` (a literal), `{ spread: true }` (any number of them) or
 * `{ text }` (a value the check cannot read). Returns `{ form, since, gated }` or `{ form, unknown: why }`.
 */
export function classify(name, args, table = COMMANDS) {
  let command = name.toUpperCase();
  let rest = args;
  if (CONTAINERS.includes(command)) {
    const sub = args[0];
    if (!sub || sub.lit === undefined) return { form: command, unknown: `its subcommand is not a literal` };
    command = `${command} ${sub.lit.toUpperCase()}`;
    rest = args.slice(1);
  }
  const entry = table[command];
  if (!entry) return { form: command, unknown: 'the command is not in the table' };
  const versions = [entry.since];
  const words = [];
  const count = rest.some((a) => a.spread) ? Infinity : rest.length;
  for (const rule of entry.variadic ?? []) {
    const applies = rule.minArgs !== undefined ? count >= rule.minArgs : count <= rule.maxArgs;
    if (applies) {
      versions.push(rule.since);
      if (rule.notes) words.push(`(${rule.notes})`);
    }
  }
  if (entry.options) {
    const seen = new Set();
    for (let i = entry.positional ?? 0; i < rest.length;) {
      const arg = rest[i];
      const option = arg.lit !== undefined ? entry.options[arg.lit.toUpperCase()] : undefined;
      if (!option) {
        if (entry.leading) break;
        const shown = arg.lit !== undefined ? `'${arg.lit}'` : arg.spread ? 'a spread' : `\`${arg.text}\``;
        return { form: `${command} ${words.join(' ')}`.trim(), unknown: `${shown} where an option is expected` };
      }
      const word = arg.lit.toUpperCase();
      seen.add(word);
      words.push(word);
      versions.push(option.since);
      i += 1 + option.args;
    }
    for (const rule of entry.together ?? []) {
      if (rule.all.every((word) => seen.has(word))) versions.push(rule.since);
    }
  }
  const form = [command, ...words].join(' ');
  return { form, since: maxVersion(versions), gated: entry.gated };
}

// ---------------------------------------------------------------------------------------------------------
// Lua: tokens, includes, expressions

/** `lua/<name>` with its `--- @include "x"` lines replaced (each include once), line by line with origins. */
export function expandLua(file, readFile, seen = new Set()) {
  const lines = [];
  readFile(file)
    .split('\n')
    .forEach((text, index) => {
      const include = /^--- @include "([\w-]+)"$/.exec(text);
      if (!include) {
        lines.push({ text, file, line: index + 1 });
        return;
      }
      const name = include[1];
      if (seen.has(name)) return;
      seen.add(name);
      lines.push(...expandLua(`lua/includes/${name}.lua`, readFile, seen));
    });
  return lines;
}

const LUA_SYMBOLS = ['...', '..', '==', '~=', '<=', '>=', '::', '//'];

/** Lua tokens of `lines` (from expandLua): { t: 'name' | 'str' | 'num' | 'sym', v, file, line }. */
export function tokenizeLua(lines) {
  const text = lines.map((l) => l.text).join('\n');
  const origin = (offset) => {
    let line = 0;
    for (let i = 0; i < offset; i++) if (text.charCodeAt(i) === 10) line++;
    return lines[line] ?? lines.at(-1);
  };
  const tokens = [];
  const longBracket = (at) => {
    const m = /^\[(=*)\[/.exec(text.slice(at, at + 20));
    if (!m) return -1;
    const close = text.indexOf(`]${m[1]}]`, at + m[0].length);
    return close === -1 ? text.length : close + m[1].length + 2;
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (text.startsWith('--', i)) {
      const end = longBracket(i + 2);
      i = end !== -1 ? end : text.indexOf('\n', i) === -1 ? text.length : text.indexOf('\n', i);
      continue;
    }
    const at = origin(i);
    const push = (t, v) => tokens.push({ t, v, file: at.file, line: at.line });
    if (c === "'" || c === '"') {
      let j = i + 1;
      let value = '';
      while (j < text.length && text[j] !== c) {
        if (text[j] === '\\') {
          value += text[j + 1];
          j += 2;
        } else value += text[j++];
      }
      push('str', value);
      i = j + 1;
      continue;
    }
    if (c === '[') {
      const end = longBracket(i);
      if (end !== -1) {
        push('str', text.slice(i, end).replace(/^\[=*\[|\]=*\]$/g, ''));
        i = end;
        continue;
      }
    }
    const number = /^(0[xX][0-9a-fA-F]+|\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)/.exec(text.slice(i, i + 40));
    if (number) {
      push('num', number[0]);
      i += number[0].length;
      continue;
    }
    const name = /^[A-Za-z_]\w*/.exec(text.slice(i, i + 200));
    if (name) {
      push('name', name[0]);
      i += name[0].length;
      continue;
    }
    const symbol = LUA_SYMBOLS.find((s) => text.startsWith(s, i)) ?? c;
    push('sym', symbol);
    i += symbol.length;
  }
  return tokens;
}

const KEYWORDS = new Set(
  'and break do else elseif end false for function goto if in local nil not or repeat return then true until while'.split(
    ' ',
  ),
);
const BINARY = {
  or: 1,
  and: 2,
  '<': 3,
  '>': 3,
  '<=': 3,
  '>=': 3,
  '~=': 3,
  '==': 3,
  '|': 4,
  '~': 5,
  '&': 6,
  '<<': 7,
  '>>': 7,
  '..': 9,
  '+': 10,
  '-': 10,
  '*': 11,
  '/': 11,
  '//': 11,
  '%': 11,
  '^': 14,
};
const UNARY_PRIORITY = 12;

/** A Lua expression parser over `tokens`; `parse(i)` returns [node, next index]. */
function expressionParser(tokens) {
  const is = (i, v) => tokens[i]?.v === v && tokens[i].t !== 'str';
  const expect = (i, v) => {
    if (!is(i, v)) throw new Error(`expected '${v}' at ${where(tokens[i])}`);
    return i + 1;
  };
  function skipFunction(i) {
    // From just after `function`: past its matching `end`.
    let depth = 1;
    for (; i < tokens.length; i++) {
      const t = tokens[i];
      if (t.t !== 'name') continue;
      if (t.v === 'function' || t.v === 'if' || t.v === 'do' || t.v === 'repeat') depth++;
      else if (t.v === 'end' || t.v === 'until') depth--;
      if (depth === 0) return i + 1;
    }
    return i;
  }
  function table(i) {
    const node = { k: 'table', tok: tokens[i], fields: [], items: [] };
    i = expect(i, '{');
    while (!is(i, '}')) {
      if (tokens[i].t === 'name' && is(i + 1, '=') && !KEYWORDS.has(tokens[i].v)) {
        const [value, next] = parse(i + 2);
        node.fields.push({ name: tokens[i].v, value });
        i = next;
      } else if (is(i, '[')) {
        const [key, afterKey] = parse(i + 1);
        const [value, next] = parse(expect(expect(afterKey, ']'), '='));
        node.fields.push({ key, value });
        i = next;
      } else {
        const [value, next] = parse(i);
        node.items.push(value);
        i = next;
      }
      if (is(i, ',') || is(i, ';')) i++;
    }
    return [node, i + 1];
  }
  function args(i) {
    if (tokens[i]?.t === 'str') return [[{ k: 'str', v: tokens[i].v, tok: tokens[i] }], i + 1];
    if (is(i, '{')) {
      const [t, next] = table(i);
      return [[t], next];
    }
    i = expect(i, '(');
    const list = [];
    while (!is(i, ')')) {
      const [arg, next] = parse(i);
      list.push(arg);
      i = is(next, ',') ? next + 1 : next;
    }
    return [list, i + 1];
  }
  function primary(i) {
    const t = tokens[i];
    if (!t) throw new Error('unexpected end of script');
    let node;
    if (t.t === 'str') node = { k: 'str', v: t.v, tok: t };
    else if (t.t === 'num') node = { k: 'num', v: t.v, tok: t };
    else if (t.t === 'name' && (t.v === 'nil' || t.v === 'true' || t.v === 'false')) node = { k: t.v, tok: t };
    else if (t.t === 'name' && t.v === 'function') return [{ k: 'func', tok: t }, skipFunction(i + 1)];
    else if (t.t === 'name' && !KEYWORDS.has(t.v)) node = { k: 'name', v: t.v, tok: t };
    else if (is(i, '...')) node = { k: 'vararg', tok: t };
    else if (is(i, '{')) return suffixes(...table(i));
    else if (is(i, '(')) {
      const [inner, next] = parse(i + 1);
      return suffixes({ k: 'paren', e: inner, tok: t }, expect(next, ')'));
    } else throw new Error(`unexpected '${t.v}' at ${where(t)}`);
    return node.k === 'name' ? suffixes(node, i + 1) : [node, i + 1];
  }
  function suffixes(node, i) {
    for (;;) {
      if (is(i, '.') && tokens[i + 1]?.t === 'name') {
        node = { k: 'field', obj: node, name: tokens[i + 1].v, tok: tokens[i + 1] };
        i += 2;
      } else if (is(i, '[') && !(tokens[i + 1]?.v === '[' || tokens[i + 1]?.v === '=')) {
        const [key, next] = parse(i + 1);
        node = { k: 'index', obj: node, key, tok: node.tok };
        i = expect(next, ']');
      } else if (is(i, ':') && tokens[i + 1]?.t === 'name') {
        const [list, next] = args(i + 2);
        node = { k: 'method', obj: node, name: tokens[i + 1].v, args: list, tok: node.tok };
        i = next;
      } else if (is(i, '(') || is(i, '{') || tokens[i]?.t === 'str') {
        const [list, next] = args(i);
        node = { k: 'call', fn: node, args: list, tok: node.tok };
        i = next;
      } else return [node, i];
    }
  }
  function parse(i, limit = 0) {
    let node;
    const t = tokens[i];
    if (t && t.t !== 'str' && (t.v === 'not' || t.v === '-' || t.v === '#' || t.v === '~')) {
      const [e, next] = parse(i + 1, UNARY_PRIORITY);
      node = { k: 'un', op: t.v, e, tok: t };
      i = next;
    } else [node, i] = primary(i);
    for (;;) {
      const op = tokens[i];
      const priority = op && op.t !== 'str' ? BINARY[op.v] : undefined;
      if (priority === undefined || priority <= limit) return [node, i];
      // `..` and `^` are right-associative.
      const [r, next] = parse(i + 1, op.v === '..' || op.v === '^' ? priority - 1 : priority);
      node = { k: 'bin', op: op.v, l: node, r, tok: op };
      i = next;
    }
  }
  function list(i) {
    const exprs = [];
    for (;;) {
      const [e, next] = parse(i);
      exprs.push(e);
      if (!is(next, ',')) return [exprs, next];
      i = next + 1;
    }
  }
  return { parse, list, args, skipFunction, is };
}

const where = (t) => (t ? `${t.file}:${t.line}` : 'end of script');

/** Source text of an expression node, for messages. */
function show(node) {
  switch (node.k) {
    case 'str':
      return `'${node.v}'`;
    case 'num':
    case 'name':
      return node.v;
    case 'field':
      return `${show(node.obj)}.${node.name}`;
    case 'index':
      return `${show(node.obj)}[${show(node.key)}]`;
    case 'call':
      return `${show(node.fn)}(${node.args.map(show).join(', ')})`;
    case 'method':
      return `${show(node.obj)}:${node.name}(${node.args.map(show).join(', ')})`;
    case 'bin':
      return `${show(node.l)} ${node.op} ${show(node.r)}`;
    case 'un':
      return `${node.op}${node.op === 'not' ? ' ' : ''}${show(node.e)}`;
    case 'paren':
      return `(${show(node.e)})`;
    case 'table':
      return '{...}';
    default:
      return node.k;
  }
}

/**
 * What one script does, read statically: its redis.call/pcall sites, and the definitions and call sites of its
 * names (without scopes).
 */
function readScript(tokens) {
  const p = expressionParser(tokens);
  const defs = new Map(); // name -> [{ kind: 'expr' | 'param' | 'iter' | 'numeric' | 'multi', ... }]
  const fieldDefs = new Map(); // 'name.field' -> [expr]
  const elementDefs = new Map(); // table name -> [expr] (t[i] = e, table.insert(t, e))
  const functions = new Map(); // name -> { params, returns: [expr], start, end }
  const calls = new Map(); // function name -> [args]
  const redisCalls = [];
  const addDef = (name, def) => defs.set(name, [...(defs.get(name) ?? []), def]);
  const claimed = new Set(); // indexes of `=` that a `local` or `for` statement consumed
  const bodies = [];
  // For each token, the innermost bracket it sits in ('{' marks a table constructor's field `name = value`).
  const enclosing = [];
  const open = [];
  for (const t of tokens) {
    if (t.t === 'sym' && (t.v === ')' || t.v === ']' || t.v === '}')) open.pop();
    enclosing.push(open.at(-1));
    if (t.t === 'sym' && (t.v === '(' || t.v === '[' || t.v === '{')) open.push(t.v);
  }

  // Function definitions first, so that `return` can be attributed to the innermost body.
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (t.t !== 'name' || t.v !== 'function') continue;
    let j = i + 1;
    let name;
    if (tokens[j]?.t === 'name' && !p.is(j, '(')) {
      name = tokens[j].v;
      j++;
      while ((p.is(j, '.') || p.is(j, ':')) && tokens[j + 1]?.t === 'name') j += 2;
    }
    const params = [];
    j++; // (
    while (!p.is(j, ')')) {
      if (tokens[j].t === 'name') params.push(tokens[j].v);
      j++;
    }
    const end = p.skipFunction(j + 1);
    const fn = { name, params, returns: [], start: j + 1, end, tok: t };
    bodies.push(fn);
    if (name) {
      functions.set(name, fn);
      params.forEach((param, index) => addDef(param, { kind: 'param', fn: name, index }));
    }
  }
  const innermost = (i) =>
    bodies.filter((b) => b.start <= i && i < b.end).sort((a, b) => b.start - a.start)[0] ?? undefined;

  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (t.t === 'str') continue;
    const prev = tokens[i - 1];
    if (t.v === 'local' && tokens[i + 1]?.v !== 'function') {
      const names = [];
      let j = i + 1;
      while (tokens[j]?.t === 'name') {
        names.push(tokens[j].v);
        j++;
        if (p.is(j, '<')) j += 3; // <const>, <close>
        if (p.is(j, ',')) j++;
        else break;
      }
      if (p.is(j, '=')) {
        claimed.add(j);
        const [exprs] = p.list(j + 1);
        names.forEach((name, index) => {
          if (index < exprs.length)
            addDef(name, {
              kind: names.length > exprs.length && index === exprs.length - 1 ? 'multi' : 'expr',
              expr: exprs[index],
            });
          else addDef(name, { kind: 'multi', expr: exprs.at(-1) });
        });
      }
    } else if (t.v === 'for') {
      const names = [];
      let j = i + 1;
      while (tokens[j]?.t === 'name' && !KEYWORDS.has(tokens[j].v)) {
        names.push(tokens[j].v);
        j += p.is(j + 1, ',') ? 2 : 1;
      }
      if (p.is(j, '=')) {
        claimed.add(j);
        for (const name of names) addDef(name, { kind: 'numeric' });
      } else {
        const [exprs] = p.list(j + 1);
        names.forEach((name, index) => addDef(name, { kind: 'iter', exprs, index }));
      }
    } else if (t.v === 'return') {
      const body = innermost(i);
      if (body && !['end', 'else', 'elseif', 'until'].includes(tokens[i + 1]?.v) && tokens[i + 1]) {
        const [exprs] = p.list(i + 1);
        body.returns.push(exprs[0]);
      }
    } else if (t.v === '=' && !claimed.has(i) && enclosing[i] === undefined) {
      // An assignment `name = e`, `name.field = e` or `name[k] = e` (not a table constructor's field).
      const [exprs] = p.list(i + 1);
      if (prev?.t === 'name' && !p.is(i - 2, '.') && !p.is(i - 2, ':') && !p.is(i - 2, '{') && !p.is(i - 2, ',')) {
        addDef(prev.v, { kind: 'expr', expr: exprs[0] });
      } else if (prev?.t === 'name' && p.is(i - 2, '.') && tokens[i - 3]?.t === 'name') {
        const key = `${tokens[i - 3].v}.${prev.v}`;
        fieldDefs.set(key, [...(fieldDefs.get(key) ?? []), exprs[0]]);
      } else if (p.is(i - 1, ']')) {
        let depth = 0;
        let j = i - 1;
        for (; j >= 0; j--) {
          if (p.is(j, ']')) depth++;
          else if (p.is(j, '[') && --depth === 0) break;
        }
        const table = tokens[j - 1];
        if (table?.t === 'name') elementDefs.set(table.v, [...(elementDefs.get(table.v) ?? []), exprs[0]]);
      }
    } else if (t.t === 'name' && t.v === 'redis' && p.is(i + 1, '.') && /^p?call$/.test(tokens[i + 2]?.v ?? '')) {
      const [list] = p.args(i + 3);
      redisCalls.push({ tok: t, args: list, body: innermost(i) });
    } else if (t.t === 'name' && !KEYWORDS.has(t.v) && p.is(i + 1, '(') && prev?.v !== 'function') {
      const [list] = p.args(i + 1);
      const callee = prev && p.is(i - 1, '.') && tokens[i - 2]?.t === 'name' ? `${tokens[i - 2].v}.${t.v}` : t.v;
      calls.set(callee, [...(calls.get(callee) ?? []), { args: list, body: innermost(i) }]);
      if (callee === 'table.insert' && list[0]?.k === 'name') {
        const table = list[0].v;
        elementDefs.set(table, [...(elementDefs.get(table) ?? []), list.at(-1)]);
      }
    }
  }
  // The functions that run: called from the script's top level, or from a function that runs.
  const live = new Set();
  const pending = [undefined];
  while (pending.length > 0) {
    const body = pending.pop();
    for (const [callee, sites] of calls) {
      const fn = functions.get(callee);
      if (fn && !live.has(fn) && sites.some((site) => site.body === body)) {
        live.add(fn);
        pending.push(fn);
      }
    }
  }
  const runs = (body) => body === undefined || live.has(body) || !body.name;
  for (const [callee, sites] of calls)
    calls.set(
      callee,
      sites.filter((site) => runs(site.body)),
    );
  return { defs, fieldDefs, elementDefs, functions, calls, redisCalls, runs };
}

/** Data-flow questions about one script: which values a name can take, whether a value comes from KEYS. */
function analysis(script) {
  const { defs, fieldDefs, elementDefs, functions, calls } = script;

  /** Every expression `name` can stand for (through locals, assignments and parameters), or a reason why not. */
  function sources(node, seen = new Set()) {
    if (node.k === 'paren') return sources(node.e, seen);
    if (node.k === 'bin' && node.op === 'or') return [...sources(node.l, seen), ...sources(node.r, seen)];
    // `c and v`: v (what `c` is when false is no string, never a key or a command).
    if (node.k === 'bin' && node.op === 'and') return sources(node.r, seen);
    if (node.k === 'field') {
      const values = fieldValues(node, seen);
      return values.length === 0 ? [node] : values.flatMap((value) => sources(value, seen));
    }
    if (node.k !== 'name' || node.v === 'KEYS' || node.v === 'ARGV') return [node];
    if (seen.has(node.v)) return [];
    seen.add(node.v);
    const found = defs.get(node.v);
    if (!found) return [{ k: 'undefined', v: node.v, tok: node.tok }];
    return found.flatMap((def) => {
      if (def.kind === 'expr') return sources(def.expr, seen);
      if (def.kind === 'param') {
        const sites = calls.get(def.fn) ?? [];
        // A function this script never calls does not run here: the scripts that call it check its body.
        if (sites.length === 0) return [];
        return sites.flatMap(({ args }) =>
          args[def.index] ? sources(args[def.index], seen) : [{ k: 'missing', v: node.v, fn: def.fn, tok: node.tok }],
        );
      }
      return [{ k: def.kind, v: node.v, def, tok: node.tok }];
    });
  }

  /** Why `node` is not a key taken from KEYS, or undefined when it is. */
  function notFromKeys(node, seen = new Set()) {
    for (const source of sources(node)) {
      const why = sourceNotFromKeys(source, seen);
      if (why) return why;
    }
    return undefined;
  }

  function sourceNotFromKeys(node, seen) {
    switch (node.k) {
      case 'index':
        if (node.obj.k === 'name' && node.obj.v === 'KEYS') return undefined;
        if (node.obj.k === 'name' && node.obj.v === 'ARGV') return `it comes from ARGV (${show(node)})`;
        return tableNotOfKeys(node.obj, seen);
      case 'field':
        return `${show(node)} is no field of a table built here`;
      case 'iter': {
        // for _, v in ipairs(t) / pairs(t): v is an element of t.
        const [iterator] = node.def.exprs;
        if (node.def.index === 1 && iterator?.k === 'call' && ['ipairs', 'pairs'].includes(iterator.fn.v ?? '')) {
          return tableNotOfKeys(iterator.args[0], seen);
        }
        return `${node.v} is a loop variable`;
      }
      case 'call': {
        const fn = node.fn.k === 'name' ? functions.get(node.fn.v) : undefined;
        if (node.fn.k === 'field' && node.fn.obj.v === 'redis') return `it is read from Redis (${show(node)})`;
        if (!fn) return `it is computed by ${show(node.fn)}()`;
        if (seen.has(fn)) return undefined;
        seen.add(fn);
        if (fn.returns.length === 0) return `${fn.name}() returns nothing`;
        for (const value of fn.returns) {
          const why = notFromKeys(value, seen);
          if (why) return `${fn.name}() returns a value that is no key: ${why}`;
        }
        return undefined;
      }
      case 'bin':
        if (node.op === '..') return `it is built by concatenation (${show(node)})`;
        return `it is computed (${show(node)})`;
      case 'str':
        return `it is a literal (${show(node)})`;
      case 'num':
        return `it is a number (${show(node)})`;
      case 'undefined':
        return `${node.v} is not defined in the script`;
      case 'missing':
        return `a call of ${node.fn}() passes no ${node.v}`;
      case 'numeric':
        return `${node.v} is a loop counter`;
      case 'multi':
        return `${node.v} is one of several values of ${show(node.def.expr)}`;
      default:
        return `it is ${show(node)}`;
    }
  }

  /** The table constructors `node` can stand for. */
  function tables(node, seen = new Set()) {
    return sources(node, seen).filter((s) => s.k === 'table');
  }

  /** What `t.name` can hold: the field of the constructors `t` stands for, and assignments `t.name = e`. */
  function fieldValues(node, seen) {
    const values = [];
    for (const t of tables(node.obj, new Set(seen))) {
      for (const field of t.fields) if (field.name === node.name) values.push(field.value);
    }
    if (node.obj.k === 'name') values.push(...(fieldDefs.get(`${node.obj.v}.${node.name}`) ?? []));
    return values;
  }

  /** Why table `node` may hold something that is not a key from KEYS; undefined when all it holds is. */
  function tableNotOfKeys(node, seen) {
    if (!node) return 'no table';
    if (node.k === 'name' && node.v === 'KEYS') return undefined;
    const found = sources(node);
    const names = new Set([node, ...found].filter((s) => s.k === 'name').map((s) => s.v));
    for (const source of found) {
      if (source.k === 'name' && source.v === 'KEYS') continue;
      if (source.k !== 'table') return `${show(node)} is no table built from KEYS (${show(source)})`;
      for (const item of [...source.items, ...source.fields.map((f) => f.value)]) {
        const unpacked = item.k === 'call' && /^(table\.)?unpack$/.test(show(item.fn)) ? item.args[0] : undefined;
        const why = unpacked ? tableNotOfKeys(unpacked, seen) : notFromKeys(item, seen);
        if (why) return why;
      }
    }
    for (const name of names) {
      for (const element of elementDefs.get(name) ?? []) {
        const why = notFromKeys(element, seen);
        if (why) return why;
      }
    }
    return undefined;
  }

  /** The command names `node` can be (literals only), or undefined when one of them is not a literal. */
  function commandNames(node) {
    const found = sources(node);
    if (found.some((s) => s.k !== 'str')) return undefined;
    return [...new Set(found.map((s) => s.v.toUpperCase()))];
  }

  return { notFromKeys, commandNames };
}

/** A Lua argument as classify() takes it. */
function luaArg(node) {
  if (node.k === 'str') return { lit: node.v };
  if (node.k === 'call' && /^(table\.)?unpack$/.test(show(node.fn))) return { spread: true, text: show(node) };
  return { text: show(node) };
}

/** Key positions (0-based into the arguments) of `command` by the table: keys, then the published channel. */
function keyPositions(entry, count) {
  if (entry.keys === 'first') return [0];
  if (entry.keys === 'all') return Array.from({ length: count }, (_, i) => i);
  if (entry.channel) return [0];
  return [];
}

/**
 * Findings of every Lua script (`files`: paths under lua/, includes too) with `readFile(path)`. Each finding
 * is { file, line, message }.
 */
export function checkLua(
  files,
  readFile,
  { table = COMMANDS, floor = FLOOR, gateHolds = () => true, onForm = () => {} } = {},
) {
  const findings = new Map();
  const report = (tok, message) =>
    findings.set(`${tok.file}:${tok.line}: ${message}`, { file: tok.file, line: tok.line, message });
  const includes = files.filter((f) => f.startsWith('lua/includes/'));
  // A script with its includes expanded: what runs on the server, and what the key analysis needs. An
  // include is also read alone, for the version check of a function no script calls yet.
  const units = [
    ...files.filter((f) => !f.startsWith('lua/includes/')).map((f) => ({ file: f, lines: expandLua(f, readFile) })),
    ...includes.map((f) => ({ file: f, lines: expandLua(f, readFile), alone: true })),
  ];
  for (const unit of units) {
    let script;
    try {
      script = readScript(tokenizeLua(unit.lines));
    } catch (error) {
      report({ file: unit.file, line: 0 }, `cannot read the script: ${error.message}`);
      continue;
    }
    const flow = analysis(script);
    // A function this script never calls does not run here (the scripts that call it check its body).
    for (const call of script.redisCalls.filter((c) => unit.alone || script.runs(c.body))) {
      const [name, ...args] = call.args;
      // Read alone, an include's calls are checked for their versions when the command is a literal; its
      // functions' parameters (keys, a command) are checked in the scripts that call them.
      if (unit.alone && name?.k !== 'str') continue;
      const names = name ? flow.commandNames(name) : undefined;
      if (!names) {
        report(
          call.tok,
          `cannot classify the command ${name ? show(name) : '(none)'}: not a literal (add its values to the script as literals)`,
        );
        continue;
      }
      for (const command of names) {
        const form = classify(command, args.map(luaArg), table);
        onForm(`${call.tok.file}:${call.tok.line}`, form);
        if (form.unknown) {
          report(
            call.tok,
            `cannot classify ${form.form}: ${form.unknown}; add it to scripts/server-floor/commands.mjs`,
          );
          continue;
        }
        if (compareVersions(form.since, floor) > 0 && !(form.gated && gateHolds(form.gated))) {
          report(call.tok, `${form.form} needs Redis ${form.since}, above the floor ${floor}`);
        }
        if (unit.alone) continue;
        const entry = table[command];
        for (const position of keyPositions(entry, args.length)) {
          const arg = args[position];
          if (!arg) continue;
          if (arg.k === 'call' && /^(table\.)?unpack$/.test(show(arg.fn))) {
            const why =
              arg.args[0]?.k === 'name' && arg.args[0].v === 'KEYS'
                ? undefined
                : 'it is unpacked from a table not checked';
            if (why)
              report(
                call.tok,
                `${entry.channel ? 'channel' : 'key'} of ${command} (${show(arg)}) is not declared in KEYS: ${why}`,
              );
            continue;
          }
          const why = flow.notFromKeys(arg);
          if (why)
            report(
              call.tok,
              `${entry.channel ? 'channel' : 'key'} of ${command} (${show(arg)}) is not declared in KEYS: ${why}`,
            );
        }
      }
    }
  }
  return [...findings.values()];
}

// ---------------------------------------------------------------------------------------------------------
// TypeScript: arrays of a command and its arguments, ioredis' call('CMD', ...), the clients' typed methods

const CAPITALS = /^[A-Z][A-Z_-]*$/;

/** A TypeScript argument as classify() takes it. */
function tsArg(node, source) {
  if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) return { lit: node.text };
  if (ts.isSpreadElement(node)) return { spread: true, text: node.getText(source) };
  return { text: node.getText(source) };
}

/** Findings of the TypeScript `files` (paths under src/) with `readFile(path)`. */
export function checkTypeScript(
  files,
  readFile,
  { table = COMMANDS, floor = FLOOR, gateHolds = () => true, onForm = () => {} } = {},
) {
  const findings = [];
  for (const file of files) {
    const source = ts.createSourceFile(file, readFile(file), ts.ScriptTarget.Latest, true);
    const line = (node) => source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
    const check = (node, name, args) => {
      const form = classify(name, args, table);
      onForm(`${file}:${line(node)}`, form);
      if (form.unknown) {
        findings.push({
          file,
          line: line(node),
          message: `cannot classify ${form.form}: ${form.unknown}; add it to scripts/server-floor/commands.mjs`,
        });
      } else if (compareVersions(form.since, floor) > 0 && !(form.gated && gateHolds(form.gated))) {
        findings.push({
          file,
          line: line(node),
          message: `${form.form} needs Redis ${form.since}, above the floor ${floor}`,
        });
      }
    };
    const typed = CLIENT_METHODS.files.includes(file);
    const visit = (node) => {
      if (ts.isArrayLiteralExpression(node)) {
        const [first, ...rest] = node.elements;
        if (first && ts.isStringLiteral(first) && CAPITALS.test(first.text)) {
          const excluded = NOT_COMMANDS.some((n) => n.file === file && n.first === first.text);
          if (!excluded)
            check(
              node,
              first.text,
              rest.map((a) => tsArg(a, source)),
            );
        }
      } else if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
        const method = node.expression.name.text;
        const [first, ...rest] = node.arguments;
        if (method === 'call' && first && ts.isStringLiteral(first) && CAPITALS.test(first.text)) {
          check(
            node,
            first.text,
            rest.map((a) => tsArg(a, source)),
          );
        } else if (typed && Object.hasOwn(CLIENT_METHODS.methods, method)) {
          check(node, CLIENT_METHODS.methods[method], []);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return findings;
}

// ---------------------------------------------------------------------------------------------------------

/** Whether the gate the table names is still in its file. */
export function gateHolds(gate, readFile = (f) => readFileSync(join(root, f), 'utf8')) {
  try {
    return readFile(gate.file).includes(gate.contains);
  } catch {
    return false;
  }
}

function listFiles(dir, ext) {
  return readdirSync(join(root, dir), { recursive: true })
    .map((f) => `${dir}/${String(f).replaceAll('\\', '/')}`)
    .filter((f) => f.endsWith(ext) && !f.endsWith('.generated.ts') && !f.endsWith('.d.ts'))
    .sort();
}

/** Every Lua and TypeScript file the check reads, and how it reads them. */
export function repositoryFiles() {
  return {
    lua: listFiles('lua', '.lua'),
    typescript: listFiles('src', '.ts'),
    readFile: (f) => readFileSync(join(root, f), 'utf8'),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { lua, typescript: source, readFile } = repositoryFiles();
  // Each form once per place (an include runs in several scripts), to say how much was read.
  const forms = { lua: new Set(), typescript: new Set() };
  const findings = [
    ...checkLua(lua, readFile, {
      gateHolds: (g) => gateHolds(g, readFile),
      onForm: (at, form) => forms.lua.add(`${at} ${form.form}`),
    }),
    ...checkTypeScript(source, readFile, {
      gateHolds: (g) => gateHolds(g, readFile),
      onForm: (at, form) => forms.typescript.add(`${at} ${form.form}`),
    }),
  ];
  for (const gate of new Set(Object.values(COMMANDS).flatMap((e) => (e.gated ? [e.gated] : [])))) {
    if (!gateHolds(gate, readFile)) {
      findings.push({ file: gate.file, line: 0, message: `the gate the table names is gone: "${gate.contains}"` });
    }
  }
  for (const f of findings) console.log(`${relative(root, join(root, f.file))}:${f.line}: ${f.message}`);
  if (process.argv.includes('--verbose') || findings.length === 0) {
    console.log(
      `server floor ${FLOOR}: ${forms.lua.size} command forms in ${lua.length} Lua files and ` +
        `${forms.typescript.size} in ${source.length} TypeScript files checked, ` +
        `${findings.length} finding${findings.length === 1 ? '' : 's'}`,
    );
  }
  process.exitCode = findings.length === 0 ? 0 : 1;
}
