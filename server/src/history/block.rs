//! Compressed blocks of raw readings: one card's readings over one window, as Gorilla's and
//! Prometheus's chunks keep a series. Timestamps are stored once for the card's five metrics,
//! as deltas of deltas; each metric as the difference from the reading before, both in
//! variable-width bit codes where the common case (a reading a second, a value that did not
//! move) costs one bit. Each column sits in its own byte-aligned section after a length, so a
//! query decodes the timestamps and the one metric it asks for.
//!
//! Layout: a version byte, the reading count, the first timestamp (varints), then sections
//! (length varint + bytes): timestamps, util, mem_mib, temp_c, power_dw, clock_mhz. An
//! optional metric's section starts with two bits: none present, all present, or a presence
//! bit per reading.

use super::Reading;

/// Seconds of readings per block, aligned to multiples of it: a 1-hour query reads six or seven
/// blocks per card, and what is not in a block yet (at most two windows) is small.
pub const WINDOW_S: i64 = 600;

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

/// Prefix codes for a signed number: `0` is zero; then 1 to 4 one-bits and a zero select a
/// width, the widest taking the whole 64 bits. `widths` suit the column: timestamps' deltas
/// of deltas are almost always 0, values move by a few units or jump.
fn put_signed(w: &mut BitWriter, v: i64, widths: &[u32; 4]) {
    if v == 0 {
        w.push(0, 1);
        return;
    }
    let z = zigzag(v);
    for (i, width) in widths.iter().enumerate() {
        if *width == 64 || z < (1u64 << width) {
            // i + 1 one-bits, a terminating zero except for the last code.
            let ones = i as u32 + 1;
            if i < widths.len() - 1 {
                w.push(((1u64 << ones) - 1) << 1, ones + 1);
            } else {
                w.push((1u64 << ones) - 1, ones);
            }
            w.push(z, *width);
            return;
        }
    }
    unreachable!("the last width is 64 bits")
}

fn get_signed(r: &mut BitReader, widths: &[u32; 4]) -> Result<i64, Corrupt> {
    let mut ones = 0;
    while ones < widths.len() && r.take(1)? == 1 {
        ones += 1;
    }
    if ones == 0 {
        return Ok(0);
    }
    Ok(unzigzag(r.take(widths[ones - 1])?))
}

const TIME_WIDTHS: [u32; 4] = [7, 12, 20, 64];
const VALUE_WIDTHS: [u32; 4] = [4, 8, 16, 64];

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
    let (mut previous, mut delta) = (first, 0i64);
    for r in readings.iter().skip(1) {
        let d = r.t - previous;
        put_signed(&mut times, d - delta, &TIME_WIDTHS);
        (previous, delta) = (r.t, d);
    }
    section(times);
    for column in Column::ALL {
        let mut bits = BitWriter::default();
        let present = readings.iter().filter(|r| column.of(r).is_some()).count();
        let mode = match present {
            0 => 0,
            p if p == readings.len() => 1,
            _ => 2,
        };
        if column.index() >= 2 {
            bits.push(mode, 2);
        }
        let mut last = 0i64;
        for r in readings {
            let value = column.of(r);
            if mode == 2 {
                bits.push(u64::from(value.is_some()), 1);
            }
            if let Some(v) = value {
                put_signed(&mut bits, v.wrapping_sub(last), &VALUE_WIDTHS);
                last = v;
            }
        }
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
        *part = block.get(at..at + len).ok_or(Corrupt("a section is cut"))?;
        at += len;
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
    for _ in 1..s.count {
        delta += get_signed(&mut bits, &TIME_WIDTHS)?;
        t += delta;
        out.push(t);
    }
    Ok(out)
}

fn values(s: &Sections, column: Column) -> Result<Vec<Option<i64>>, Corrupt> {
    let mut bits = BitReader::new(s.parts[1 + column.index()]);
    let mode = if column.index() >= 2 {
        bits.take(2)?
    } else {
        1
    };
    let mut out = Vec::with_capacity(s.count);
    let mut last = 0i64;
    for _ in 0..s.count {
        let present = match mode {
            0 => false,
            1 => true,
            2 => bits.take(1)? == 1,
            _ => return Err(Corrupt("unknown presence mode")),
        };
        if present {
            last = last.wrapping_add(get_signed(&mut bits, &VALUE_WIDTHS)?);
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
