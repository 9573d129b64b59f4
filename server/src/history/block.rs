//! Compressed blocks of raw readings: one card's readings over one window, as Gorilla's and
//! Prometheus's chunks keep a series. Timestamps are stored once for the card's five metrics,
//! as deltas of deltas; each metric as the difference from the reading before, both as Rice
//! codes whose parameter each block picks per column: a reading a second and a value that did
//! not move cost one bit, noise a few. Each column sits in its own byte-aligned section after
//! a length, so a query decodes the timestamps and the one metric it asks for.
//!
//! Layout: a version byte, the reading count, the first timestamp (varints), then sections
//! (length varint + bytes): timestamps, util, mem_mib, temp_c, power_dw, clock_mhz. An
//! optional metric's section starts with two bits: none present, all present, or a presence
//! bit per reading (the bits follow). A section of numbers starts with its Rice parameter.

use super::Reading;

/// Seconds of readings per block, aligned to multiples of it: a 1-hour query reads two or three
/// blocks per card. Half an hour of a busy card is a few kilobytes, which fill SQLite's
/// overflow pages (a block of ten minutes, about 2 KB, left half of each page empty); a card
/// at rest makes blocks of a few hundred bytes, several to a page.
pub const WINDOW_S: i64 = 1800;

/// How often the head is packed into blocks (the current window's block is extended): a raw
/// query finds at most this much, and a minute, still in rows.
pub const COMPACT_EVERY_S: i64 = 600;

const VERSION: u8 = 1;

/// Why a stored block could not be read (a bug or a damaged database, never bad input).
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a history block is damaged: {}", self.0)
    }
}

impl std::error::Error for Corrupt {}

/// The metric columns of a reading, in their order in a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Util,
    Mem,
    Temp,
    Power,
    Clock,
}

impl Column {
    const ALL: [Column; 5] = [
        Column::Util,
        Column::Mem,
        Column::Temp,
        Column::Power,
        Column::Clock,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Whether a reading may lack it (its section then says which readings have it).
    fn optional(self) -> bool {
        matches!(self, Column::Temp | Column::Power | Column::Clock)
    }

    fn of(self, r: &Reading) -> Option<i64> {
        match self {
            Column::Util => Some(r.util),
            Column::Mem => Some(r.mem_mib),
            Column::Temp => r.temp_c,
            Column::Power => r.power_dw,
            Column::Clock => r.clock_mhz,
        }
    }

    fn set(self, r: &mut Reading, v: Option<i64>) {
        match self {
            Column::Util => r.util = v.unwrap_or(0),
            Column::Mem => r.mem_mib = v.unwrap_or(0),
            Column::Temp => r.temp_c = v,
            Column::Power => r.power_dw = v,
            Column::Clock => r.clock_mhz = v,
        }
    }
}

/// Bits appended most significant first.
#[derive(Default)]
struct BitWriter {
    bytes: Vec<u8>,
    used: u32,
}

impl BitWriter {
    fn push(&mut self, value: u64, bits: u32) {
        for i in (0..bits).rev() {
            if self.used == 0 {
                self.bytes.push(0);
            }
            let bit = ((value >> i) & 1) as u8;
            let last = self.bytes.len() - 1;
            self.bytes[last] |= bit << (7 - self.used);
            self.used = (self.used + 1) % 8;
        }
    }

    fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

struct BitReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> BitReader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn take(&mut self, bits: u32) -> Result<u64, Corrupt> {
        let mut value = 0u64;
        for _ in 0..bits {
            let byte = self
                .bytes
                .get(self.at / 8)
                .ok_or(Corrupt("a section ends early"))?;
            value = (value << 1) | u64::from((byte >> (7 - self.at % 8)) & 1);
            self.at += 1;
        }
        Ok(value)
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Longest unary quotient of a Rice code; a larger one escapes to the whole 64 bits.
const ESCAPE: u64 = 24;

/// Bits a Rice code with parameter `k` takes for `z` (a zigzagged number).
fn rice_bits(z: u64, k: u32) -> u64 {
    match z >> k {
        q if q < ESCAPE => q + 1 + u64::from(k),
        _ => ESCAPE + 64,
    }
}

/// The first number of a section (a value's difference from zero, unlike the others): its
/// bit length in 7 bits, then its bits.
fn put_first(w: &mut BitWriter, number: i64) {
    let z = zigzag(number);
    let width = 64 - z.leading_zeros();
    w.push(u64::from(width), 7);
    w.push(z, width);
}

fn get_first(r: &mut BitReader) -> Result<i64, Corrupt> {
    let width = r.take(7)? as u32;
    if width > 64 {
        return Err(Corrupt("a number is wider than 64 bits"));
    }
    Ok(unzigzag(r.take(width)?))
}

/// Writes signed numbers: the first as [`put_first`] does, the rest as Rice codes (the
/// quotient of the zigzagged number by 2^k in unary, then its k low bits) with the `k` that
/// makes them smallest, written before them in 5 bits: a run of zeros costs a bit each, noise
/// of a few units a few bits, and the code follows whatever spread a column has in this block.
fn put_numbers(w: &mut BitWriter, numbers: &[i64]) {
    let Some((first, numbers)) = numbers.split_first() else {
        return;
    };
    put_first(w, *first);
    let zs: Vec<u64> = numbers.iter().map(|v| zigzag(*v)).collect();
    let k = (0..=24u32)
        .min_by_key(|k| zs.iter().map(|z| rice_bits(*z, *k)).sum::<u64>())
        .unwrap_or(0);
    w.push(u64::from(k), 5);
    for z in zs {
        let q = z >> k;
        if q < ESCAPE {
            // q ones and a zero, then the low bits.
            w.push(((1u64 << q) - 1) << 1, q as u32 + 1);
            w.push(z & ((1u64 << k) - 1), k);
        } else {
            w.push((1u64 << ESCAPE) - 1, ESCAPE as u32);
            w.push(z, 64);
        }
    }
}

/// Reads what [`put_numbers`] wrote: `count` numbers.
fn get_numbers(r: &mut BitReader, count: usize) -> Result<Vec<i64>, Corrupt> {
    let mut out = Vec::with_capacity(count);
    if count == 0 {
        return Ok(out);
    }
    out.push(get_first(r)?);
    let k = r.take(5)? as u32;
    if k > 24 {
        return Err(Corrupt("a code parameter is out of range"));
    }
    for _ in 1..count {
        let mut q = 0u64;
        while q < ESCAPE && r.take(1)? == 1 {
            q += 1;
        }
        let z = if q == ESCAPE {
            r.take(64)?
        } else {
            (q << k) | r.take(k)?
        };
        out.push(unzigzag(z));
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Result<u64, Corrupt> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at).ok_or(Corrupt("a number ends early"))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Corrupt("a number is too long"))
}

/// Encodes readings of one card, sorted by time with one reading per second at most.
pub fn encode(readings: &[Reading]) -> Vec<u8> {
    let mut out = vec![VERSION];
    put_varint(&mut out, readings.len() as u64);
    let first = readings.first().map_or(0, |r| r.t);
    put_varint(&mut out, zigzag(first));
    let mut section = |bits: BitWriter| {
        let bytes = bits.finish();
        put_varint(&mut out, bytes.len() as u64);
        out.extend_from_slice(&bytes);
    };
    let mut times = BitWriter::default();
    let mut dods = Vec::with_capacity(readings.len());
    let (mut previous, mut delta) = (first, 0i64);
    for r in readings.iter().skip(1) {
        let d = r.t - previous;
        dods.push(d - delta);
        (previous, delta) = (r.t, d);
    }
    put_numbers(&mut times, &dods);
    section(times);
    for column in Column::ALL {
        let mut bits = BitWriter::default();
        let present = readings.iter().filter(|r| column.of(r).is_some()).count();
        let mode = match present {
            0 => 0,
            p if p == readings.len() => 1,
            _ => 2,
        };
        if column.optional() {
            bits.push(mode, 2);
        }
        let mut last = 0i64;
        let mut deltas = Vec::with_capacity(present);
        for r in readings {
            let value = column.of(r);
            if mode == 2 {
                bits.push(u64::from(value.is_some()), 1);
            }
            if let Some(v) = value {
                deltas.push(v.wrapping_sub(last));
                last = v;
            }
        }
        put_numbers(&mut bits, &deltas);
        section(bits);
    }
    out
}

/// The sections of a block: the count, the first timestamp, and each section's bytes.
struct Sections<'a> {
    count: usize,
    first: i64,
    parts: [&'a [u8]; 6],
}

fn sections(block: &[u8]) -> Result<Sections<'_>, Corrupt> {
    if block.first() != Some(&VERSION) {
        return Err(Corrupt("unknown version"));
    }
    let mut at = 1;
    let count = usize::try_from(get_varint(block, &mut at)?).map_err(|_| Corrupt("count"))?;
    let first = unzigzag(get_varint(block, &mut at)?);
    let mut parts: [&[u8]; 6] = [&[]; 6];
    for part in &mut parts {
        let len = usize::try_from(get_varint(block, &mut at)?).map_err(|_| Corrupt("length"))?;
        let end = at.checked_add(len).ok_or(Corrupt("a section is cut"))?;
        *part = block.get(at..end).ok_or(Corrupt("a section is cut"))?;
        at = end;
    }
    // Every reading after the first takes at least a bit of the timestamps' section: a count
    // beyond that is damage (and must not size an allocation).
    if count > 1 && count - 1 > parts[0].len() * 8 {
        return Err(Corrupt("the count exceeds the timestamps"));
    }
    Ok(Sections {
        count,
        first,
        parts,
    })
}

fn times(s: &Sections) -> Result<Vec<i64>, Corrupt> {
    let mut bits = BitReader::new(s.parts[0]);
    let mut out = Vec::with_capacity(s.count);
    if s.count == 0 {
        return Ok(out);
    }
    out.push(s.first);
    let (mut t, mut delta) = (s.first, 0i64);
    // Wrapping: a damaged block decodes to nonsense, not to a panic.
    for dod in get_numbers(&mut bits, s.count - 1)? {
        delta = delta.wrapping_add(dod);
        t = t.wrapping_add(delta);
        out.push(t);
    }
    Ok(out)
}

fn values(s: &Sections, column: Column) -> Result<Vec<Option<i64>>, Corrupt> {
    let mut bits = BitReader::new(s.parts[1 + column.index()]);
    let mode = if column.optional() { bits.take(2)? } else { 1 };
    let present: Vec<bool> = match mode {
        0 => vec![false; s.count],
        1 => vec![true; s.count],
        2 => (0..s.count)
            .map(|_| Ok(bits.take(1)? == 1))
            .collect::<Result<_, Corrupt>>()?,
        _ => return Err(Corrupt("unknown presence mode")),
    };
    let deltas = get_numbers(&mut bits, present.iter().filter(|p| **p).count())?;
    let mut deltas = deltas.into_iter();
    let mut last = 0i64;
    let mut out = Vec::with_capacity(s.count);
    for here in present {
        if here {
            last = last.wrapping_add(deltas.next().ok_or(Corrupt("too few values"))?);
            out.push(Some(last));
        } else {
            out.push(None);
        }
    }
    Ok(out)
}

/// Every reading of a block.
pub fn decode(block: &[u8]) -> Result<Vec<Reading>, Corrupt> {
    let s = sections(block)?;
    let mut out: Vec<Reading> = times(&s)?
        .into_iter()
        .map(|t| Reading {
            t,
            util: 0,
            mem_mib: 0,
            temp_c: None,
            power_dw: None,
            clock_mhz: None,
        })
        .collect();
    for column in Column::ALL {
        for (r, v) in out.iter_mut().zip(values(&s, column)?) {
            column.set(r, v);
        }
    }
    Ok(out)
}

/// One column's readings of a block, (time, value) where the value is present: what a query
/// for one metric needs, without decoding the others.
pub fn decode_column(block: &[u8], column: Column) -> Result<Vec<(i64, i64)>, Corrupt> {
    let s = sections(block)?;
    Ok(times(&s)?
        .into_iter()
        .zip(values(&s, column)?)
        .filter_map(|(t, v)| Some((t, v?)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(t: i64, util: i64) -> Reading {
        Reading {
            t,
            util,
            mem_mib: 40_000 + util * 3,
            temp_c: Some(30 + util / 4),
            power_dw: Some(600 + util * 61),
            clock_mhz: None,
        }
    }

    /// A small deterministic generator (no dependency for a test).
    fn noise(seed: &mut u64) -> i64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed % 1000) as i64
    }

    #[test]
    fn what_is_encoded_decodes_exactly() {
        let mut seed = 7u64;
        let mut readings = Vec::new();
        let mut t = 1_800_000_000;
        for i in 0..600 {
            // Mostly a second apart, with gaps and a late poll; values that sit still, creep
            // and jump; optional metrics that come and go.
            t += match i % 97 {
                0 => 31,
                50 => 2,
                _ => 1,
            };
            let mut r = reading(t, noise(&mut seed) % 101);
            if i % 13 == 0 {
                r.power_dw = None;
            }
            if i % 200 == 0 {
                r.mem_mib = i64::MAX - i;
                r.clock_mhz = Some(-5);
            }
            readings.push(r);
        }
        let block = encode(&readings);
        assert_eq!(decode(&block).unwrap(), readings);
        let power = decode_column(&block, Column::Power).unwrap();
        let expected: Vec<(i64, i64)> = readings
            .iter()
            .filter_map(|r| Some((r.t, r.power_dw?)))
            .collect();
        assert_eq!(power, expected);
        assert_eq!(
            decode_column(&block, Column::Clock).unwrap().len(),
            3,
            "three readings had a clock"
        );
        // Empty and single blocks too.
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
        assert_eq!(decode(&encode(&readings[..1])).unwrap(), readings[..1]);
    }

    #[test]
    fn a_steady_card_costs_a_few_bits_a_reading() {
        // Ten minutes of a card at rest: every value still, a reading every second.
        let readings: Vec<Reading> = (0..600).map(|i| reading(1_800_000_000 + i, 0)).collect();
        let block = encode(&readings);
        // 600 timestamps and 4 present metrics at one bit each, plus headers: 3,000 samples
        // (a metric at a second) in 0.14 bytes apiece.
        assert!(block.len() < 420, "{} bytes", block.len());
        assert_eq!(decode(&block).unwrap(), readings);
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let readings: Vec<Reading> = (0..50).map(|i| reading(1_800_000_000 + i, i)).collect();
        let block = encode(&readings);
        for cut in 0..block.len() {
            // Whatever a cut block decodes to, it never panics; most cuts are errors.
            let _ = decode(&block[..cut]);
        }
        assert!(decode(&block[..block.len() - 1]).is_err());
        assert_eq!(decode(&[9, 0]), Err(Corrupt("unknown version")));
    }
}
