//! Test-only helpers shared by pmlab's crates (a dev-dependency, never a
//! dependency): a small seeded generator ([`Rng`]) and the mutations the
//! property tests apply to valid inputs ([`mutate_bytes`], [`mutate_text`]).
//!
//! The property tests replace cargo-fuzz targets: they run on stable Rust
//! in `cargo test`, with fixed seeds and bounded case counts, so a failure
//! names its seed and case and reproduces on every machine.
//!
//! Depends on nothing.
//!
//! # Example
//!
//! ```
//! use pmlab_testkit::{mutate_text, Rng};
//!
//! let mut rng = Rng::new(1);
//! let base = "a = 1\nb = \"x\"\n";
//! for _ in 0..10 {
//!     let m = mutate_text(&mut rng, base, &["0", "-1", "\"\""]);
//!     // feed `m` to a parser: it must return Ok or a clean error
//!     let _ = m.len();
//! }
//! ```
#![deny(missing_docs)]

/// A small deterministic generator (SplitMix64): the same seed gives the
/// same sequence on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One element of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// True with probability 1/`n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// One random damage to `b`: flipped bits, a byte replaced, random bytes
/// inserted, a range deleted, a run of 0xff (overlong varints, huge
/// lengths) or a truncation. `keep` leading bytes (a magic number) are
/// left alone by the in-place kinds, so those reach past the header.
pub fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>, keep: usize) {
    if b.len() <= keep {
        let len = 1 + rng.below(16);
        b.extend(rng.bytes(len));
        return;
    }
    let at = |rng: &mut Rng, len: usize| keep + rng.below(len - keep);
    match rng.below(6) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = at(rng, b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            let i = at(rng, b.len());
            b[i] = rng.next_u64() as u8;
        }
        2 => {
            let i = at(rng, b.len());
            let len = rng.below(40);
            let junk = rng.bytes(len);
            b.splice(i..i, junk);
        }
        3 => {
            let i = at(rng, b.len());
            let end = (i + rng.below(40)).min(b.len());
            b.drain(i..end);
        }
        4 => {
            let i = at(rng, b.len());
            let end = (i + 12).min(b.len());
            b[i..end].fill(0xff);
        }
        _ => b.truncate(rng.below(b.len())),
    }
}

/// `text` with one random edit: a line dropped or duplicated, a value
/// (the part after `=` or `:`, or a whole word) replaced by one of
/// `values`, a word replaced by a random one, two lines swapped, random
/// characters inserted, or the text cut short.
pub fn mutate_text(rng: &mut Rng, text: &str, values: &[&str]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = lines.len();
    let i = rng.below(n);
    match rng.below(7) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        2 => {
            let v = if values.is_empty() {
                ""
            } else {
                *rng.pick(values)
            };
            let l = &lines[i];
            lines[i] = match l.find(['=', ':']) {
                Some(p) => format!("{} {v}", &l[..=p]),
                None => v.to_string(),
            };
        }
        3 => {
            let words: Vec<&str> = lines[i].split_whitespace().collect();
            if !words.is_empty() {
                let w = rng.below(words.len());
                let junk = random_word(rng);
                let mut out: Vec<String> = words.iter().map(|s| s.to_string()).collect();
                out[w] = junk;
                lines[i] = out.join(" ");
            }
        }
        4 => {
            let j = rng.below(n);
            lines.swap(i, j);
        }
        5 => {
            let l = &lines[i];
            let cut = floor_char(l, rng.below(l.len() + 1));
            let junk = random_word(rng);
            lines[i] = format!("{}{junk}{}", &l[..cut], &l[cut..]);
        }
        _ => {
            let all = lines.join("\n");
            let cut = floor_char(&all, rng.below(all.len() + 1));
            return all[..cut].to_string();
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// A short random word of printable ASCII, punctuation and a little UTF-8.
pub fn random_word(rng: &mut Rng) -> String {
    const CHARS: &[char] = &[
        'a', 'z', '0', '9', '-', '.', '_', '=', '"', '[', ']', '{', '}', ',', '#', ' ', '\t', '\\',
        'é', '\u{0}', 'x', 'e', '+', 'K', 'i', 'B', 'n', 's',
    ];
    (0..1 + rng.below(8)).map(|_| *rng.pick(CHARS)).collect()
}

/// The largest char boundary of `s` at or below `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(3), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(3), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..5)
            .scan(Rng::new(4), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // SplitMix64's first output for seed 0, as published with the
        // algorithm (Steele, Lea and Flood, OOPSLA'14; Vigna's reference C).
        assert_eq!(Rng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn mutations_change_their_input_and_keep_the_header() {
        let mut rng = Rng::new(9);
        let base: Vec<u8> = (0..64).collect();
        let mut changed = 0;
        for _ in 0..200 {
            let mut b = base.clone();
            mutate_bytes(&mut rng, &mut b, 8);
            if b.len() >= 8 && b != base {
                assert_eq!(&b[..8], &base[..8]);
            }
            changed += (b != base) as u32;
            let t = mutate_text(&mut rng, "a = 1\nb = 2\n", &["x"]);
            assert!(t.len() < 64);
        }
        assert!(changed > 150, "{changed} of 200 changed");
    }
}
