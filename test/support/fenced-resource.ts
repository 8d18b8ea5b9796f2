/**
 * A fenced resource: the pattern the README recommends to users. The resource remembers the newest fencing
 * token it has seen and refuses any write that carries an older one, so a holder that lost its lock (paused
 * past its lease, say) cannot overwrite the work of the holder that came after it.
 *
 * Here the resource is a Redis (a separate server in the fault tests); the check and the write are one
 * script, so they are atomic. In a SQL database the same check is `UPDATE ... WHERE fence <= $token`.
 */
import type { Redis } from 'ioredis';

const FENCED_APPEND = `
local highWater = KEYS[1]
local log = KEYS[2]
local token = tonumber(ARGV[1])
local entry = ARGV[2]
local newest = tonumber(redis.call('GET', highWater) or '-1')
if token < newest then
  redis.call('INCR', highWater .. ':refused')
  return 0
end
redis.call('SET', highWater, ARGV[1])
redis.call('RPUSH', log, entry)
return 1`;

export class FencedResource {
  readonly #redis: Redis;
  readonly #name: string;

  constructor(redis: Redis, name: string) {
    this.#redis = redis;
    this.#name = name;
  }

  /** Appends `entry` if `token` is not older than the newest token seen; resolves to whether it was accepted. */
  async write(token: bigint, entry: string): Promise<boolean> {
    const accepted = await this.#redis.eval(
      FENCED_APPEND,
      2,
      `${this.#name}:fence`,
      `${this.#name}:log`,
      token.toString(),
      entry,
    );
    return accepted === 1;
  }

  async entries(): Promise<string[]> {
    return this.#redis.lrange(`${this.#name}:log`, 0, -1);
  }

  async refused(): Promise<number> {
    return Number((await this.#redis.get(`${this.#name}:fence:refused`)) ?? 0);
  }
}
