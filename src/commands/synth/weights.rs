//! Deterministic random weights, fast enough that writing a 2.2 GB F16 model is bound by the disk.
//!
//! One splitmix64 draw gives four 16-bit indices into a table of normal quantiles, so each weight costs a table
//! lookup (no float math, no f32→f16 conversion in the loop). The values are N(0, 0.02²) quantized to 65,536
//! levels, tails cut at about ±4.3σ: small enough that activations and logits stay finite through any depth.

use half::f16;

/// Standard deviation of the weights (the usual initialiser scale of llama-family models).
pub const WEIGHT_STD: f32 = 0.02;

/// splitmix64 (Steele, Lea, Flood 2014): one add and three xor-shift-multiplies per 64 random bits.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// A stream per tensor: the model seed mixed with the tensor name, so a tensor's values do not depend on
    /// which tensors come before it.
    pub fn for_tensor(seed: u64, name: &str) -> SplitMix64 {
        // FNV-1a of the name.
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let mut s = SplitMix64(seed ^ h);
        s.next_u64();
        s
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Inverse of the standard normal CDF, P. J. Acklam's rational approximation (relative error < 1.15e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    const P_LOW: f64 = 0.02425;
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < P_LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - P_LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

/// The 65,536 weight levels: quantiles at the midpoints (i + 0.5) / 65536, scaled to `WEIGHT_STD`.
pub struct WeightTable {
    pub f32: Vec<f32>,
    pub f16_bits: Vec<u16>,
}

impl WeightTable {
    pub fn new() -> WeightTable {
        let f32: Vec<f32> =
            (0..65536).map(|i| (normal_quantile((i as f64 + 0.5) / 65536.0) * f64::from(WEIGHT_STD)) as f32).collect();
        let f16_bits = f32.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        WeightTable { f32, f16_bits }
    }

    /// Fills `out` with random F16 weights (little-endian); `out.len()` must be a multiple of 2.
    ///
    /// Word by word rather than weight by weight: the same bytes with a quarter of the slice calls, which is what an
    /// unoptimised build (the tests' `backscope`, synthesizing a 2.2 GB model) pays for.
    pub fn fill_f16(&self, rng: &mut SplitMix64, out: &mut [u8]) {
        let t = &self.f16_bits[..];
        let level = |r: u64, j: usize| t[usize::from((r >> (16 * j)) as u16)];
        let mut words = out.chunks_exact_mut(8);
        for word in words.by_ref() {
            let r = rng.next_u64();
            let w = u64::from(level(r, 0))
                | u64::from(level(r, 1)) << 16
                | u64::from(level(r, 2)) << 32
                | u64::from(level(r, 3)) << 48;
            word.copy_from_slice(&w.to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            let r = rng.next_u64();
            for (j, pair) in tail.chunks_exact_mut(2).enumerate() {
                pair.copy_from_slice(&level(r, j).to_le_bytes());
            }
        }
    }

    /// Fills `out` with random F32 weights (little-endian); `out.len()` must be a multiple of 4.
    pub fn fill_f32(&self, rng: &mut SplitMix64, out: &mut [u8]) {
        for chunk in out.chunks_mut(16) {
            let r = rng.next_u64();
            for (j, quad) in chunk.chunks_exact_mut(4).enumerate() {
                let idx = (r >> (16 * j)) as u16;
                quad.copy_from_slice(&self.f32[usize::from(idx)].to_le_bytes());
            }
        }
    }
}

impl Default for WeightTable {
    fn default() -> Self {
        WeightTable::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time fill writes what one weight at a time wrote: a table level per 16 bits of each draw,
    /// little-endian, a fresh draw every four weights (also for a tail of one to three weights).
    #[test]
    fn f16_fill_equals_the_weight_by_weight_fill() {
        let table = WeightTable::new();
        for len in [0, 2, 6, 8, 14, 16, 1000, 1026] {
            let mut fast = vec![0u8; len];
            table.fill_f16(&mut SplitMix64::new(7), &mut fast);
            let mut rng = SplitMix64::new(7);
            let mut slow = vec![0u8; len];
            for chunk in slow.chunks_mut(8) {
                let r = rng.next_u64();
                for (j, pair) in chunk.chunks_exact_mut(2).enumerate() {
                    pair.copy_from_slice(&table.f16_bits[usize::from((r >> (16 * j)) as u16)].to_le_bytes());
                }
            }
            assert_eq!(fast, slow, "{len} bytes");
        }
    }

    #[test]
    fn quantile_matches_known_values() {
        // Reference values of the standard normal quantile (any statistics table).
        for (p, z) in
            [(0.5, 0.0), (0.975, 1.959_963_985), (0.841_344_746, 1.0), (0.001, -3.090_232_306), (1e-9, -5.997_807_015)]
        {
            assert!((normal_quantile(p) - z).abs() < 1e-6, "p={p}: {} vs {z}", normal_quantile(p));
        }
    }

    #[test]
    fn table_is_symmetric_with_the_intended_spread() {
        let t = WeightTable::new();
        let n = t.f32.len() as f64;
        let mean = t.f32.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let std = (t.f32.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(mean.abs() < 1e-7, "{mean}");
        assert!((std - f64::from(WEIGHT_STD)).abs() < 1e-4, "{std}");
        assert!(t.f32.windows(2).all(|w| w[0] <= w[1]));
        assert!(t.f32.iter().all(|v| v.is_finite() && v.abs() < 0.1));
        assert_eq!(t.f32[0], -t.f32[65535]);
        assert!(t.f16_bits.iter().all(|&b| f16::from_bits(b).is_finite()));
    }

    #[test]
    fn streams_are_deterministic_and_differ_per_tensor() {
        let t = WeightTable::new();
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        t.fill_f16(&mut SplitMix64::for_tensor(7, "x"), &mut a);
        t.fill_f16(&mut SplitMix64::for_tensor(7, "x"), &mut b);
        assert_eq!(a, b);
        t.fill_f16(&mut SplitMix64::for_tensor(7, "y"), &mut b);
        assert_ne!(a, b);
        t.fill_f16(&mut SplitMix64::for_tensor(8, "x"), &mut b);
        assert_ne!(a, b);
    }
}
