//! A minimal PNG encoder: 8-bit RGB, one IDAT chunk, zlib stream with either
//! stored blocks or one fixed-Huffman deflate block whose only matches are
//! runs (distance 1). Rows use the "Sub" filter, which turns the flat areas
//! of a chart into runs of zeros. CRC-32 and Adler-32 are computed here.

/// How the zlib stream inside the PNG is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored (uncompressed) deflate blocks of at most 65,535 bytes.
    Stored,
    /// One fixed-Huffman block with run-length matches (the default).
    Fixed,
}

fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    for (n, slot) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *slot = c;
    }
    table
}

/// CRC-32 (ISO-HDLC, as PNG uses it) of `parts` concatenated.
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let table = crc_table();
    let mut c = 0xFFFF_FFFFu32;
    for part in parts {
        for &b in *part {
            c = table[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
        }
    }
    c ^ 0xFFFF_FFFF
}

/// Adler-32 checksum of `data` (the zlib trailer).
pub fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 is the largest block for which b cannot overflow before the modulo.
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    nbits: u32,
}

impl BitWriter {
    fn new(out: Vec<u8>) -> BitWriter {
        BitWriter {
            out,
            acc: 0,
            nbits: 0,
        }
    }
    /// Write `n` bits of `v`, least significant first (deflate's order).
    fn bits(&mut self, v: u32, n: u32) {
        self.acc |= (v as u64) << self.nbits;
        self.nbits += n;
        while self.nbits >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.nbits -= 8;
        }
    }
    /// Write a Huffman code of `n` bits, most significant bit first.
    fn code(&mut self, code: u32, n: u32) {
        let mut rev = 0;
        for i in 0..n {
            rev |= ((code >> i) & 1) << (n - 1 - i);
        }
        self.bits(rev, n);
    }
    fn finish(mut self) -> Vec<u8> {
        if self.nbits > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];

fn fixed_symbol(w: &mut BitWriter, sym: u32) {
    match sym {
        0..=143 => w.code(0x30 + sym, 8),
        144..=255 => w.code(0x190 + sym - 144, 9),
        256..=279 => w.code(sym - 256, 7),
        _ => w.code(0xC0 + sym - 280, 8),
    }
}

fn deflate_fixed(data: &[u8], out: Vec<u8>) -> Vec<u8> {
    let mut w = BitWriter::new(out);
    w.bits(1, 1); // final block
    w.bits(1, 2); // fixed Huffman
    let mut i = 0;
    while i < data.len() {
        let mut run = 0;
        if i > 0 {
            let prev = data[i - 1];
            while run < 258 && i + run < data.len() && data[i + run] == prev {
                run += 1;
            }
        }
        if run >= 3 {
            let idx = LEN_BASE.iter().rposition(|&b| b as usize <= run).unwrap();
            fixed_symbol(&mut w, 257 + idx as u32);
            w.bits((run - LEN_BASE[idx] as usize) as u32, LEN_EXTRA[idx] as u32);
            w.code(0, 5); // distance code 0: distance 1
            i += run;
        } else {
            fixed_symbol(&mut w, data[i] as u32);
            i += 1;
        }
    }
    fixed_symbol(&mut w, 256);
    w.finish()
}

fn deflate_stored(data: &[u8], mut out: Vec<u8>) -> Vec<u8> {
    let mut chunks = data.chunks(65_535).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
        return out;
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none()));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// A zlib stream (RFC 1950) holding `data`.
pub fn zlib(data: &[u8], mode: Compression) -> Vec<u8> {
    let header = vec![0x78, 0x01];
    let mut out = match mode {
        Compression::Stored => deflate_stored(data, header),
        Compression::Fixed => deflate_fixed(data, header),
    };
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// Encode an RGB image (`rgb.len() == width * height * 3`) as PNG bytes.
pub fn encode_rgb(width: u32, height: u32, rgb: &[u8], mode: Compression) -> Vec<u8> {
    let stride = width as usize * 3;
    assert_eq!(rgb.len(), stride * height as usize, "pixel buffer size");
    let mut raw = Vec::with_capacity((stride + 1) * height as usize);
    for row in rgb.chunks(stride.max(1)).take(height as usize) {
        raw.push(1); // filter: Sub
        for (i, &b) in row.iter().enumerate() {
            let left = if i >= 3 { row[i - 3] } else { 0 };
            raw.push(b.wrapping_sub(left));
        }
    }
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no interlace
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib(&raw, mode));
    chunk(&mut out, b"IEND", &[]);
    out
}

/// A small PNG reader for the tests: checks the signature and every CRC,
/// inflates stored and fixed-Huffman blocks, checks Adler-32 and undoes
/// the None/Sub/Up filters. Returns width, height and RGB pixels.
#[cfg(test)]
pub(crate) fn decode_rgb(png: &[u8]) -> Result<(u32, u32, Vec<u8>), String> {
    if png.len() < 8 || png[..8] != [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A] {
        return Err("bad signature".into());
    }
    let mut pos = 8;
    let (mut w, mut h) = (0u32, 0u32);
    let mut idat = Vec::new();
    while pos + 12 <= png.len() {
        let len = u32::from_be_bytes(png[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = &png[pos + 4..pos + 8];
        let data = png.get(pos + 8..pos + 8 + len).ok_or("truncated chunk")?;
        let crc = u32::from_be_bytes(
            png.get(pos + 8 + len..pos + 12 + len)
                .ok_or("truncated crc")?
                .try_into()
                .unwrap(),
        );
        if crc != crc32(&[kind, data]) {
            return Err(format!("bad CRC in {}", String::from_utf8_lossy(kind)));
        }
        match kind {
            b"IHDR" => {
                w = u32::from_be_bytes(data[0..4].try_into().unwrap());
                h = u32::from_be_bytes(data[4..8].try_into().unwrap());
                if data[8..13] != [8, 2, 0, 0, 0] {
                    return Err("not 8-bit RGB".into());
                }
            }
            b"IDAT" => idat.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        pos += 12 + len;
    }
    let raw = inflate_zlib(&idat)?;
    let stride = w as usize * 3;
    if raw.len() != (stride + 1) * h as usize {
        return Err(format!(
            "{} bytes inflated, expected {}",
            raw.len(),
            (stride + 1) * h as usize
        ));
    }
    let mut px = vec![0u8; stride * h as usize];
    for y in 0..h as usize {
        let f = raw[y * (stride + 1)];
        let src = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let left = if x >= 3 { px[y * stride + x - 3] } else { 0 };
            let up = if y > 0 { px[(y - 1) * stride + x] } else { 0 };
            px[y * stride + x] = match f {
                0 => src[x],
                1 => src[x].wrapping_add(left),
                2 => src[x].wrapping_add(up),
                _ => return Err(format!("unsupported filter {f}")),
            };
        }
    }
    Ok((w, h, px))
}

#[cfg(test)]
fn inflate_zlib(z: &[u8]) -> Result<Vec<u8>, String> {
    struct Bits<'a> {
        d: &'a [u8],
        pos: usize,
    }
    impl Bits<'_> {
        fn bit(&mut self) -> Result<u32, String> {
            let byte = *self.d.get(self.pos / 8).ok_or("deflate stream truncated")?;
            let b = (byte >> (self.pos % 8)) & 1;
            self.pos += 1;
            Ok(b as u32)
        }
        fn bits(&mut self, n: u32) -> Result<u32, String> {
            let mut v = 0;
            for i in 0..n {
                v |= self.bit()? << i;
            }
            Ok(v)
        }
        fn code(&mut self, n: u32) -> Result<u32, String> {
            let mut v = 0;
            for _ in 0..n {
                v = (v << 1) | self.bit()?;
            }
            Ok(v)
        }
    }
    if z.len() < 6 || !((z[0] as u32) << 8 | z[1] as u32).is_multiple_of(31) || z[0] & 0x0F != 8 {
        return Err("bad zlib header".into());
    }
    let mut b = Bits { d: &z[2..], pos: 0 };
    let mut out: Vec<u8> = Vec::new();
    loop {
        let last = b.bits(1)?;
        match b.bits(2)? {
            0 => {
                b.pos = b.pos.div_ceil(8) * 8;
                let p = b.pos / 8;
                let len = u16::from_le_bytes([b.d[p], b.d[p + 1]]);
                let nlen = u16::from_le_bytes([b.d[p + 2], b.d[p + 3]]);
                if len != !nlen {
                    return Err("stored block length check failed".into());
                }
                out.extend_from_slice(&b.d[p + 4..p + 4 + len as usize]);
                b.pos += (4 + len as usize) * 8;
            }
            1 => loop {
                let mut v = b.code(7)?;
                let sym = if v <= 23 {
                    256 + v
                } else {
                    v = (v << 1) | b.bit()?;
                    if (0x30..=0xBF).contains(&v) {
                        v - 0x30
                    } else if (0xC0..=0xC7).contains(&v) {
                        280 + v - 0xC0
                    } else {
                        v = (v << 1) | b.bit()?;
                        144 + v - 0x190
                    }
                };
                if sym < 256 {
                    out.push(sym as u8);
                } else if sym == 256 {
                    break;
                } else {
                    let i = (sym - 257) as usize;
                    let len = LEN_BASE[i] as usize + b.bits(LEN_EXTRA[i] as u32)? as usize;
                    let dcode = b.code(5)?;
                    const DIST_BASE: [u32; 30] = [
                        1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513,
                        769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
                    ];
                    let extra = if dcode < 4 { 0 } else { dcode / 2 - 1 };
                    let base = *DIST_BASE.get(dcode as usize).ok_or("bad distance code")?;
                    let dist = (base + b.bits(extra)?) as usize;
                    if dist > out.len() {
                        return Err("distance too far back".into());
                    }
                    for _ in 0..len {
                        out.push(out[out.len() - dist]);
                    }
                }
            },
            _ => return Err("dynamic Huffman blocks not supported by the test reader".into()),
        }
        if last == 1 {
            break;
        }
    }
    let end = 2 + b.pos.div_ceil(8);
    let adler = u32::from_be_bytes(z.get(end..end + 4).ok_or("no adler")?.try_into().unwrap());
    if adler != adler32(&out) {
        return Err("Adler-32 mismatch".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_known_vector() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(&[b"123456789"]), 0xCBF4_3926);
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xCBF4_3926);
        // The IEND chunk's CRC, present in every PNG file.
        assert_eq!(crc32(&[b"IEND"]), 0xAE42_6082);
    }

    #[test]
    fn adler32_matches_known_vector() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(b""), 1);
    }

    #[test]
    fn both_modes_round_trip() {
        let (w, h) = (70u32, 40u32);
        let mut px = vec![255u8; (w * h * 3) as usize];
        for (i, p) in px.iter_mut().enumerate() {
            if i % 97 < 5 {
                *p = (i * 31 % 251) as u8;
            }
        }
        for mode in [Compression::Stored, Compression::Fixed] {
            let png = encode_rgb(w, h, &px, mode);
            let (dw, dh, back) = decode_rgb(&png).unwrap();
            assert_eq!((dw, dh), (w, h));
            assert_eq!(back, px, "{mode:?}");
        }
    }

    #[test]
    fn run_length_compresses_flat_images() {
        let (w, h) = (400u32, 300u32);
        let px = vec![255u8; (w * h * 3) as usize];
        let fixed = encode_rgb(w, h, &px, Compression::Fixed);
        let stored = encode_rgb(w, h, &px, Compression::Stored);
        assert!(
            fixed.len() * 20 < stored.len(),
            "{} vs {}",
            fixed.len(),
            stored.len()
        );
        assert_eq!(decode_rgb(&fixed).unwrap().2, px);
    }

    #[test]
    fn stored_blocks_split_large_images() {
        let (w, h) = (200u32, 200u32); // 120,200 raw bytes: two stored blocks
        let px: Vec<u8> = (0..w * h * 3).map(|i| (i % 256) as u8).collect();
        let png = encode_rgb(w, h, &px, Compression::Stored);
        assert_eq!(decode_rgb(&png).unwrap().2, px);
    }

    #[test]
    fn corrupted_crc_is_detected() {
        let mut png = encode_rgb(4, 4, &[0u8; 48], Compression::Fixed);
        let n = png.len();
        png[n - 20] ^= 0x55;
        assert!(decode_rgb(&png).is_err());
    }
}
