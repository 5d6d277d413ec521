//! NVIDIA product names to compute capabilities (`data/nvidia_products.toml`, each row citing NVIDIA's CUDA GPUs
//! list): the driver names a GPU only by product, and a fleet report groups GPUs by arch.

use std::sync::OnceLock;

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Product {
    pub name: String,
    pub sm: u32,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Products {
    product: Vec<Product>,
}

pub fn products() -> &'static [Product] {
    static T: OnceLock<Products> = OnceLock::new();
    &T.get_or_init(|| {
        toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/nvidia_products.toml")))
            .expect("data/nvidia_products.toml parses")
    })
    .product
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).map(|w| w.to_ascii_uppercase()).collect()
}

/// The row whose name occurs as whole words in `model` (the driver's `Model:` string); the longest such name.
pub fn product_of(model: &str) -> Option<&'static Product> {
    let model = words(model);
    products()
        .iter()
        .filter(|p| {
            let name = words(&p.name);
            !name.is_empty() && model.windows(name.len()).any(|w| w == name.as_slice())
        })
        .max_by_key(|p| words(&p.name).len() * 100 + p.name.len())
}

/// `sm_90` for a model string the table knows.
pub fn arch_of(model: &str) -> Option<String> {
    product_of(model).map(|p| format!("sm_{}", p.sm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_model_strings_map_to_the_listed_capability() {
        // Model strings as the driver writes them (nvidia-smi's name); capabilities from NVIDIA's CUDA GPUs list.
        let cases = [
            ("NVIDIA H100 80GB HBM3", Some("sm_90")),
            ("NVIDIA H200", Some("sm_90")),
            ("NVIDIA A100-SXM4-80GB", Some("sm_80")),
            ("NVIDIA A10G", Some("sm_86")),
            ("NVIDIA A10", Some("sm_86")),
            ("Tesla T4", Some("sm_75")),
            ("NVIDIA GeForce RTX 4070 Ti", Some("sm_89")),
            ("NVIDIA GeForce RTX 3090", Some("sm_86")),
            ("NVIDIA RTX 6000 Ada Generation", Some("sm_89")),
            ("Quadro RTX 6000", Some("sm_75")),
            ("Tesla P40", Some("sm_61")),
            ("NVIDIA GeForce RTX 5090", Some("sm_120")),
            ("NVIDIA Some Future GPU", None),
        ];
        for (model, want) in cases {
            assert_eq!(arch_of(model).as_deref(), want, "{model}");
        }
    }

    #[test]
    fn every_row_cites_a_source_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for p in products() {
            assert!(p.source.starts_with("https://"), "{}", p.name);
            assert!(seen.insert(words(&p.name)), "{} twice", p.name);
            assert!(p.sm >= 30 && p.sm % 10 <= 9, "{}", p.name);
        }
    }
}
