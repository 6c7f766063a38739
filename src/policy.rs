//! Kernel behaviour as named policies, with presets per release.
//!
//! Kernel counterpart: the behaviour changes the seeds measure — e.g. 7.1's batched cache sync,
//! 5.19's arm64 direction rules. A `--kernel X.Y` preset picks every policy as that release has it;
//! `--policy key=value` overrides one.
//!
//! Invariant: a policy value is always one of its listed names; anything else is an input error
//! that lists the choices.

use crate::arch::arm64::DirRules;
use crate::dma::swiotlb::x86_2012::ADDR_POLICIES;
use crate::dma::sync_policy;

/// The kernel release a run models, as (major, minor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion(pub u32, pub u32);

impl KernelVersion {
    pub fn parse(s: &str) -> Option<KernelVersion> {
        let (a, b) = s.trim().split_once('.')?;
        Some(KernelVersion(a.parse().ok()?, b.parse().ok()?))
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// Every policy a run uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    pub kernel: KernelVersion,
    /// `sync`: `per-entry` or `batched`.
    pub sync: String,
    /// `arm64_dir_rules`: `pre-5.19` or `5.19`.
    pub arm64_dir_rules: DirRules,
    /// `swiotlb_addr`: `virt` (≤ 3.6) or `phys` (3.7 on), for the 2012 swiotlb ops.
    pub swiotlb_addr: String,
    /// `walk_flush`: `by-va` (≤ 5.14, and every non-Qualcomm arm-smmu) or `asid` (5.15's
    /// `flush_walk_prefer_tlbiasid`, set only by the Qualcomm implementation).
    pub walk_flush: String,
    /// `unmap_split`: `per-page` (≤ 5.14, `ops->map`/`ops->unmap`) or `unmap-pages` (5.15,
    /// `map_pages`/`unmap_pages`).
    pub unmap_split: String,
}

/// The newest release whose behaviour dmasim models.
pub const LATEST: KernelVersion = KernelVersion(7, 1);

/// `(key, allowed values, meaning)` of every policy.
pub const KEYS: &[(&str, &[&str], &str)] = &[
    (
        "sync",
        sync_policy::NAMES,
        "cache-maintenance completion: a barrier per sg entry (<= 7.0) or one per call (7.1)",
    ),
    (
        "arm64_dir_rules",
        &["pre-5.19", "5.19"],
        "arm64 map for FROM_DEVICE invalidates (pre-5.19) or cleans (5.19)",
    ),
    (
        "swiotlb_addr",
        ADDR_POLICIES,
        "swiotlb keeps its pool addresses virtual, translated by __phys_addr calls (virt, <= 3.6), or physical (phys, 3.7)",
    ),
    (
        "walk_flush",
        crate::iommu::arm_smmu::WALK_FLUSH_NAMES,
        "arm-smmu (MMU-500) flush of a freed table's walk: a TLBIVA per granule (by-va, <= 5.14) or one TLBIASID (asid, 5.15; Qualcomm implementations only)",
    ),
    (
        "unmap_split",
        crate::iommu::core::SPLIT_NAMES,
        "iommu core: one driver call per page (per-page, <= 5.14) or per run of pages (unmap-pages, 5.15)",
    ),
];

impl Policies {
    /// The policies of a release.
    pub fn preset(kernel: KernelVersion) -> Policies {
        Policies {
            kernel,
            sync: if kernel >= KernelVersion(7, 1) {
                "batched"
            } else {
                "per-entry"
            }
            .to_string(),
            arm64_dir_rules: if kernel >= KernelVersion(5, 19) {
                DirRules::Since5_19
            } else {
                DirRules::Pre5_19
            },
            swiotlb_addr: if kernel >= KernelVersion(3, 7) {
                "phys"
            } else {
                "virt"
            }
            .to_string(),
            walk_flush: if kernel >= KernelVersion(5, 15) {
                "asid"
            } else {
                "by-va"
            }
            .to_string(),
            unmap_split: if kernel >= KernelVersion(5, 15) {
                "unmap-pages"
            } else {
                "per-page"
            }
            .to_string(),
        }
    }

    /// Apply one `key=value` override; the error text says what was expected.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let Some((_, allowed, _)) = KEYS.iter().find(|(k, _, _)| *k == key) else {
            let keys: Vec<&str> = KEYS.iter().map(|k| k.0).collect();
            return Err(format!(
                "unknown policy `{key}`; known policies: {}",
                keys.join(", ")
            ));
        };
        if !allowed.contains(&value) {
            return Err(format!(
                "policy `{key}` cannot be `{value}`; choose one of: {}",
                allowed.join(", ")
            ));
        }
        match key {
            "sync" => self.sync = value.to_string(),
            "swiotlb_addr" => self.swiotlb_addr = value.to_string(),
            "walk_flush" => self.walk_flush = value.to_string(),
            "unmap_split" => self.unmap_split = value.to_string(),
            "arm64_dir_rules" => {
                self.arm64_dir_rules = if value == "pre-5.19" {
                    DirRules::Pre5_19
                } else {
                    DirRules::Since5_19
                }
            }
            _ => unreachable!("KEYS and this match list the same policies"),
        }
        Ok(())
    }

    /// Apply `key=value[,key=value...]`.
    pub fn apply(&mut self, spec: &str) -> Result<(), String> {
        for kv in spec.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("policy override `{kv}` is not of the form key=value"))?;
            self.set(k.trim(), v.trim())?;
        }
        Ok(())
    }

    /// A one-line summary for reports.
    pub fn summary(&self) -> String {
        let rules = match self.arm64_dir_rules {
            DirRules::Pre5_19 => "pre-5.19",
            DirRules::Since5_19 => "5.19",
        };
        format!(
            "kernel {} (sync={}, arm64_dir_rules={rules}, swiotlb_addr={})",
            self.kernel, self.sync, self.swiotlb_addr
        )
    }
}

impl Policies {
    /// A one-line summary of the IOMMU-path policies, for IOMMU scenario reports.
    pub fn iommu_summary(&self) -> String {
        format!(
            "kernel {} (walk_flush={}, unmap_split={})",
            self.kernel, self.walk_flush, self.unmap_split
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_follow_releases() {
        assert_eq!(Policies::preset(KernelVersion(7, 0)).sync, "per-entry");
        assert_eq!(Policies::preset(KernelVersion(7, 1)).sync, "batched");
        assert_eq!(
            Policies::preset(KernelVersion(5, 18)).arm64_dir_rules,
            DirRules::Pre5_19
        );
        assert!(KernelVersion(5, 9) < KernelVersion(5, 10));
        assert_eq!(Policies::preset(KernelVersion(3, 6)).swiotlb_addr, "virt");
        assert_eq!(Policies::preset(KernelVersion(3, 7)).swiotlb_addr, "phys");
        let p = Policies::preset(KernelVersion(5, 14));
        assert_eq!(
            (p.walk_flush.as_str(), p.unmap_split.as_str()),
            ("by-va", "per-page")
        );
        let p = Policies::preset(KernelVersion(5, 15));
        assert_eq!(
            (p.walk_flush.as_str(), p.unmap_split.as_str()),
            ("asid", "unmap-pages")
        );
    }

    #[test]
    fn iommu_policies_are_checked() {
        let mut p = Policies::preset(KernelVersion(5, 14));
        p.apply("walk_flush=asid,unmap_split=unmap-pages").unwrap();
        assert_eq!(
            p.iommu_summary(),
            "kernel 5.14 (walk_flush=asid, unmap_split=unmap-pages)"
        );
        assert!(p.apply("walk_flush=range").unwrap_err().contains("by-va"));
        assert!(
            p.apply("unmap_split=never")
                .unwrap_err()
                .contains("per-page")
        );
    }

    #[test]
    fn overrides_are_checked() {
        let mut p = Policies::preset(KernelVersion(7, 0));
        p.apply("sync=batched").unwrap();
        assert_eq!(p.sync, "batched");
        assert!(p.apply("sync=sometimes").unwrap_err().contains("per-entry"));
        assert!(
            p.apply("color=blue")
                .unwrap_err()
                .contains("known policies")
        );
        assert!(p.apply("sync").is_err());
        p.apply("swiotlb_addr=virt").unwrap();
        assert_eq!(p.swiotlb_addr, "virt");
        assert!(p.apply("swiotlb_addr=linear").unwrap_err().contains("phys"));
    }
}
