/**
 * A tiny raster and PNG encoder (node:zlib only) for the bench chart, so that viewers that do not
 * render SVG can show it too. Text uses a 3 × 5 pixel font, upper case, drawn at twice its size.
 */
import { deflateSync } from 'node:zlib';

const GLYPHS: Record<string, string> = {
  A: '010101111101101', B: '110101110101110', C: '011100100100011', D: '110101101101110', E: '111100110100111',
  F: '111100110100100', G: '011100101101011', H: '101101111101101', I: '111010010010111', J: '001001001101010',
  K: '101101110101101', L: '100100100100111', M: '101111111101101', N: '110101101101101', O: '010101101101010',
  P: '110101110100100', Q: '010101101110011', R: '110101110101101', S: '011100010001110', T: '111010010010010',
  U: '101101101101111', V: '101101101101010', W: '101101111111101', X: '101101010101101', Y: '101101010010010',
  Z: '111001010100111', '0': '111101101101111', '1': '010110010010111', '2': '110001010100111', '3': '110001010001110',
  '4': '101101111001001', '5': '111100110001110', '6': '011100111101111', '7': '111001010010010', '8': '111101111101111',
  '9': '111101111001110', '.': '000000000000010', ',': '000000000010100', ':': '000010000010000', '/': '001001010100100',
  '-': '000000111000000', '(': '010100100100010', ')': '010001001001010', '%': '101001010100101', '!': '010010010000010',
  '+': '000010111010000', '=': '000111000111000', '>': '100010001010100', '<': '001010100010001', "'": '010010000000000',
  '?': '110001010000010', ';': '000010000010100', '@': '010101111100011', '&': '010101010101011', '_': '000000000000111', ' ': '000000000000000',
};
const ALIASES: Record<string, string> = { '×': 'X', '—': '-', '–': '-', '−': '-', '⚠': '!', '·': '.', '→': '>', '≥': '>', '≤': '<', '"': "'" };

export const SCALE = 2;
/** Horizontal advance of one character, in pixels. */
export const ADVANCE = 4 * SCALE;

export type Rgb = readonly [number, number, number];

export function parseColor(hex: string, opacity = 1): Rgb {
  const n = Number.parseInt(hex.slice(1), 16);
  const mix = (c: number) => Math.round(255 - (255 - c) * opacity);
  return [mix((n >> 16) & 255), mix((n >> 8) & 255), mix(n & 255)];
}

export class Raster {
  readonly pixels: Uint8Array;
  constructor(
    readonly width: number,
    readonly height: number,
  ) {
    this.pixels = new Uint8Array(width * height * 3).fill(255);
  }

  fillRect(x: number, y: number, w: number, h: number, color: Rgb): void {
    const x0 = Math.max(0, Math.round(x));
    const y0 = Math.max(0, Math.round(y));
    const x1 = Math.min(this.width, Math.round(x + w));
    const y1 = Math.min(this.height, Math.round(y + h));
    for (let yy = y0; yy < y1; yy++) {
      for (let xx = x0; xx < x1; xx++) {
        const i = (yy * this.width + xx) * 3;
        this.pixels[i] = color[0];
        this.pixels[i + 1] = color[1];
        this.pixels[i + 2] = color[2];
      }
    }
  }

  /** `baseline` is the text's bottom edge, as in SVG; `anchor: 'end'` right-aligns at x. */
  text(x: number, baseline: number, value: string, color: Rgb, anchor: 'start' | 'end' = 'start'): void {
    const chars = [...value.toUpperCase()];
    let cx = anchor === 'end' ? x - chars.length * ADVANCE : x;
    const top = baseline - 5 * SCALE;
    for (const ch of chars) {
      const glyph = GLYPHS[ALIASES[ch] ?? ch] ?? GLYPHS['?']!;
      for (let i = 0; i < 15; i++) if (glyph[i] === '1') this.fillRect(cx + (i % 3) * SCALE, top + Math.floor(i / 3) * SCALE, SCALE, SCALE, color);
      cx += ADVANCE;
    }
  }

  png(): Buffer {
    const row = this.width * 3 + 1;
    const raw = Buffer.alloc(row * this.height);
    for (let y = 0; y < this.height; y++) {
      raw[y * row] = 0; // filter: none
      raw.set(this.pixels.subarray(y * this.width * 3, (y + 1) * this.width * 3), y * row + 1);
    }
    const header = Buffer.alloc(13);
    header.writeUInt32BE(this.width, 0);
    header.writeUInt32BE(this.height, 4);
    header.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
    return Buffer.concat([
      Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]),
      chunk('IHDR', header),
      chunk('IDAT', deflateSync(raw)),
      chunk('IEND', Buffer.alloc(0)),
    ]);
  }
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes: Buffer): number {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 255]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}
