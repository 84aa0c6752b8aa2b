// A minimal safetensors writer (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header mapping each tensor's
// name to {dtype, shape, data_offsets: [begin, end)} within the data section,
// padded with spaces to a multiple of 8 bytes, then the raw little-endian
// data. Only F32 and I32, the two dtypes the fixtures need.
import {writeFileSync} from 'node:fs';

// tensors: [[name, {dtype: 'F32' | 'I32', shape: number[], data: TypedArray}]]
export function saveSafetensors(path, tensors, metadata = {}) {
  const header = {};
  if (Object.keys(metadata).length) header.__metadata__ = metadata;
  let offset = 0;
  const blobs = [];
  for (const [name, t] of tensors) {
    const size = t.shape.reduce((a, b) => a * b, 1);
    if (t.data.length !== size) throw new Error(`${name}: ${t.data.length} values for ${t.shape}`);
    const expected = t.dtype === 'F32' ? Float32Array : Int32Array;
    if (!(t.data instanceof expected)) throw new Error(`${name}: data is not ${t.dtype}`);
    // Typed arrays are little-endian on every platform Node runs on; a
    // DataView makes it explicit rather than assumed.
    const bytes = new DataView(new ArrayBuffer(size * 4));
    for (let i = 0; i < size; ++i) {
      if (t.dtype === 'F32') bytes.setFloat32(i * 4, t.data[i], true);
      else bytes.setInt32(i * 4, t.data[i], true);
    }
    header[name] = {dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + size * 4]};
    blobs.push(new Uint8Array(bytes.buffer));
    offset += size * 4;
  }
  let text = JSON.stringify(header);
  text += ' '.repeat((8 - (Buffer.byteLength(text) % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(Buffer.byteLength(text)));
  writeFileSync(path, Buffer.concat([length, Buffer.from(text), ...blobs]));
}
