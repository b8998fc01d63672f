//! Linear SVM with L2 (squared-hinge) loss, trained by dual coordinate descent (the algorithm of
//! LIBLINEAR, Hsieh et al., ICML'08), as the paper's separability analysis uses it (§3: linear
//! kernel, L2 loss, one SVM per source cell).
//!
//! Deterministic: samples are visited in a fixed order; at most [`MAX_EPOCHS`] passes.

/// Passes over the data at most.
pub const MAX_EPOCHS: usize = 2_000;
/// Penalty C: large, to approach a hard margin (we ask "are they separable?").
pub const C: f64 = 1_000.0;

/// Standardise columns (zero mean, unit variance; constant columns become 0).
pub fn standardize(x: &mut [Vec<f64>]) {
    let Some(d) = x.first().map(Vec::len) else {
        return;
    };
    let n = x.len() as f64;
    for j in 0..d {
        let mean = x.iter().map(|r| r[j]).sum::<f64>() / n;
        let var = x.iter().map(|r| (r[j] - mean).powi(2)).sum::<f64>() / n;
        let sd = var.sqrt();
        for r in x.iter_mut() {
            r[j] = if sd > 1e-12 { (r[j] - mean) / sd } else { 0.0 };
        }
    }
}

/// Train on rows `x` with labels `y` (true = positive class). Returns weights with the bias
/// last (the bias is a constant feature 1, regularised like LIBLINEAR's `-B 1`).
pub fn train(x: &[Vec<f64>], y: &[bool], c: f64) -> Vec<f64> {
    let d = x.first().map_or(0, Vec::len) + 1;
    let mut w = vec![0.0; d];
    let mut alpha = vec![0.0; x.len()];
    let diag = 1.0 / (2.0 * c);
    let row = |i: usize| x[i].iter().copied().chain(std::iter::once(1.0));
    let qii: Vec<f64> = (0..x.len())
        .map(|i| row(i).map(|v| v * v).sum::<f64>() + diag)
        .collect();
    for _ in 0..MAX_EPOCHS {
        let mut max_pg = 0.0f64;
        for i in 0..x.len() {
            let yi = if y[i] { 1.0 } else { -1.0 };
            let wx: f64 = row(i).zip(&w).map(|(a, b)| a * b).sum();
            let g = yi * wx - 1.0 + diag * alpha[i];
            let pg = if alpha[i] == 0.0 { g.min(0.0) } else { g };
            max_pg = max_pg.max(pg.abs());
            if pg.abs() > 1e-12 {
                let old = alpha[i];
                alpha[i] = (alpha[i] - g / qii[i]).max(0.0);
                let step = (alpha[i] - old) * yi;
                for (wj, v) in w.iter_mut().zip(row(i)) {
                    *wj += step * v;
                }
            }
        }
        if max_pg < 1e-6 {
            break;
        }
    }
    w
}

/// Whether a linear SVM classifies every row correctly: the rows are linearly separable (as far
/// as the SVM finds). Rows are standardised first. One class only counts as separable.
pub fn separable(x: &[Vec<f64>], y: &[bool]) -> bool {
    if y.iter().all(|v| *v) || y.iter().all(|v| !*v) {
        return true;
    }
    let mut x = x.to_vec();
    standardize(&mut x);
    let w = train(&x, y, C);
    x.iter().zip(y).all(|(r, &yi)| {
        let f: f64 = r
            .iter()
            .chain(std::iter::once(&1.0))
            .zip(&w)
            .map(|(a, b)| a * b)
            .sum();
        (f > 0.0) == yi
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separable_and_not() {
        let x: Vec<Vec<f64>> = (0..20).map(|i| vec![f64::from(i), 0.5]).collect();
        let y: Vec<bool> = (0..20).map(|i| i >= 13).collect();
        assert!(separable(&x, &y));
        let mut y2 = y.clone();
        y2[3] = true; // a positive among the negatives: no threshold works in 1-D
        assert!(!separable(&x, &y2));
        // Separable only with both features (XOR-free diagonal split).
        let x3 = vec![
            vec![0.0, 0.0],
            vec![1.0, 0.0],
            vec![0.0, 1.0],
            vec![1.0, 1.0],
            vec![0.2, 0.9],
        ];
        let y3 = vec![false, false, false, true, false];
        assert!(separable(&x3, &y3));
        assert!(!separable(
            &x3.iter().map(|r| vec![r[0]]).collect::<Vec<_>>(),
            &[true, false, false, true, false] // x = 0 is both classes
        ));
    }
}
