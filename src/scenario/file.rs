//! The scenario file: its shared sections as TOML gives them, where each setting came from,
//! and `Scenario::parse`, which reads them and hands `[workload]` to the kind it names.
//!
//! Kernel counterpart: none; `[boot]` is read as the kernel reads its command line
//! (`early_cma()`, `early_cma_pernuma()`, `early_numa_cma()`).
//!
//! Invariants: every value read is checked where it is read, and every error names the file, the
//! line and the key.

use super::*;

/// Where a setting came from: a line of the scenario file, or the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    File(Option<usize>),
    Argument,
}

/// One `policy.key = value` of the file or `--policy key=value` of the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PolicyOverride {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) origin: Origin,
}

/// Lines of the keys that checks after an override may blame.
#[derive(Clone, Debug, Default)]
pub(super) struct Lines {
    pub(super) platform: Option<usize>,
    pub(super) kernel: Option<usize>,
    pub(super) areas: Option<usize>,
    pub(super) smmu: Option<usize>,
    pub(super) kind: Option<usize>,
    pub(super) mask: Option<usize>,
    pub(super) numa_node: Option<usize>,
    pub(super) boot_cma: Option<usize>,
    pub(super) boot_cma_pernuma: Option<usize>,
    pub(super) boot_numa_cma: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SharedFile {
    pub(super) scenario: ScenarioSection,
    pub(super) device: Option<DeviceSection>,
    pub(super) swiotlb: Option<SwiotlbSection>,
    pub(super) iommu: Option<iommu::IommuSection>,
    pub(super) boot: Option<BootSection>,
}

/// `[boot]`: kernel command-line parameters, written as on the command line (`cma = "64M@0-4G"`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BootSection {
    pub(super) cma: Option<Spanned<String>>,
    pub(super) cma_pernuma: Option<Spanned<String>>,
    pub(super) numa_cma: Option<Spanned<String>>,
    /// The kernel's build: `CONFIG_CMA_SIZE_MBYTES`, the default area without `cma=`.
    pub(super) cma_size_mbytes: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ScenarioSection {
    pub(super) name: String,
    pub(super) platform: Spanned<String>,
    pub(super) kernel: Option<Spanned<toml::Value>>,
    #[serde(default)]
    pub(super) policy: BTreeMap<String, Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeviceSection {
    pub(super) name: String,
    pub(super) coherent: bool,
    pub(super) dma_mask_bits: Spanned<i64>,
    pub(super) numa_node: Option<Spanned<i64>>,
}

/// `[swiotlb]`: the bounce pool as `swiotlb=` on the kernel command line would set it up.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SwiotlbSection {
    pub(super) size: Option<Spanned<toml::Value>>,
    pub(super) force: Option<bool>,
    pub(super) areas: Option<Spanned<i64>>,
}

/// Where a value being checked came from, so errors can name the file, line and key.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a str,
    pub(crate) text: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn line(&self, span: std::ops::Range<usize>) -> usize {
        crate::input::line_of(self.text, span.start)
    }

    /// Read a kind's `[workload]` section into its own type (unknown keys are that kind's).
    pub(crate) fn section<T: serde::de::DeserializeOwned>(
        &self,
        v: Spanned<toml::de::DeValue>,
    ) -> Result<T, InputError> {
        from_section(self.file, self.text, "workload", v)
    }

    /// The `[scenario]` section's platform: a built-in name, or a profile path relative to the
    /// scenario file's directory (never to the current directory).
    fn profile(&self, sec: &ScenarioSection, dir: &std::path::Path) -> Result<Profile, InputError> {
        let pname = sec.platform.get_ref();
        if pname.trim().is_empty() {
            return Err(self.err(
                sec.platform.span(),
                "scenario.platform",
                "empty: give a built-in platform (see `dmasim platforms`) or a profile file",
            ));
        }
        if crate::platform::is_builtin(pname) {
            return Profile::load(pname);
        }
        let rel = dir.join(pname);
        if rel.is_file() {
            Profile::load(&rel.to_string_lossy())
        } else {
            let known = crate::platform::builtin_names();
            Err(self.err(
                sec.platform.span(),
                "scenario.platform",
                format!(
                    "`{pname}` is neither a built-in platform ({}) nor a profile file next to this scenario",
                    known.join(", ")
                ),
            ))
        }
    }

    /// An integer key that must lie in `range`.
    pub(crate) fn int(
        &self,
        v: &Spanned<i64>,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<u64, InputError> {
        let x = *v.get_ref();
        if !range.contains(&x) {
            return Err(self.err(
                v.span(),
                key,
                format!("must be {}..={}, found {x}", range.start(), range.end()),
            ));
        }
        Ok(x as u64)
    }

    pub(crate) fn direction(&self, d: &Spanned<String>) -> Result<DmaDirection, InputError> {
        let direction = DmaDirection::parse(d.get_ref()).ok_or_else(|| {
            self.err(
                d.span(),
                "workload.direction",
                format!(
                    "unknown direction `{}`; choose bidirectional, to_device, from_device or none",
                    d.get_ref()
                ),
            )
        })?;
        if direction == DmaDirection::None {
            return Err(self.err(d.span(), "workload.direction", "DMA_NONE cannot be mapped or synced (the kernel's valid_dma_direction() check BUGs on it); choose bidirectional, to_device or from_device"));
        }
        Ok(direction)
    }

    pub(crate) fn err(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        msg: impl Into<String>,
    ) -> InputError {
        InputError::at(self.file, self.text, Some(span), key, msg)
    }

    pub(crate) fn size(
        &self,
        v: &toml::Value,
        span: std::ops::Range<usize>,
        key: &str,
    ) -> Result<u64, InputError> {
        let n = match v {
            toml::Value::Integer(i) if *i > 0 => Some(*i as u64),
            toml::Value::String(s) => parse_size(s),
            _ => None,
        };
        match n {
            Some(n) if n > 0 => Ok(n),
            _ => Err(self.err(
                span,
                key,
                format!("expected a positive size such as 4096, \"4K\" or \"10M\", found {v}"),
            )),
        }
    }

    /// A required key of a kind's section that is missing: blamed on the `kind` line.
    pub(crate) fn missing(&self, kind: &Spanned<String>, key: &str, what: &str) -> InputError {
        self.err(
            kind.span(),
            &format!("workload.{key}"),
            format!("missing: {what}"),
        )
    }
}

impl Scenario {
    pub fn parse(file: &str, text: &str, dir: &std::path::Path) -> Result<Scenario, InputError> {
        Scenario::parse_on(file, text, dir, None)
    }

    /// [`Scenario::parse`], on `platform` instead of the file's `scenario.platform` when given.
    pub fn parse_on(
        file: &str,
        text: &str,
        dir: &std::path::Path,
        platform: Option<Profile>,
    ) -> Result<Scenario, InputError> {
        let c = Ctx { file, text };
        let doc = parse_document(file, text)?;
        let doc_span = doc.span();
        let mut table = doc.into_inner();
        let workload = table.remove("workload");
        let f: SharedFile = from_table(file, text, Spanned::new(doc_span.clone(), table))?;
        let Some(workload) = workload else {
            return Err(InputError::at(
                file,
                text,
                Some(doc_span),
                "workload",
                "missing: a [workload] section with its `kind`",
            ));
        };

        let given = platform.is_some();
        let profile = match platform {
            Some(p) => p,
            None => c.profile(&f.scenario, dir)?,
        };
        let mut lines = Lines {
            platform: (!given).then(|| c.line(f.scenario.platform.span())),
            ..Lines::default()
        };
        let (kernel, kernel_origin) = match &f.scenario.kernel {
            None => (LATEST, Origin::File(None)),
            Some(k) => {
                let line = c.line(k.span());
                lines.kernel = Some(line);
                let v = match k.get_ref() {
                    toml::Value::String(s) => KernelVersion::parse(s),
                    toml::Value::Float(x) => Err(format!(
                        "write the release as a string, kernel = \"{x}\": as a number, 7.10 would read as 7.1"
                    )),
                    other => Err(format!(
                        "expected a release such as \"7.1\", found {other}"
                    )),
                }
                .map_err(|m| c.err(k.span(), "scenario.kernel", m))?;
                (v, Origin::File(Some(line)))
            }
        };
        let overrides = f
            .scenario
            .policy
            .iter()
            .map(|(k, v)| PolicyOverride {
                key: k.clone(),
                value: v.get_ref().clone(),
                origin: Origin::File(Some(c.line(v.span()))),
            })
            .collect();

        let iommu_cfg = match &f.iommu {
            Some(sec) => {
                let (cfg, given) = iommu::parse_section(&c, sec, &profile)?;
                if let Some(s) = &sec.smmu {
                    lines.smmu = Some(c.line(s.span()));
                }
                Some((cfg, given))
            }
            None => None,
        };

        // The workload's kind picks the section's reader.
        let kind_v = workload
            .get_ref()
            .get("kind")
            .ok_or_else(|| {
                c.err(
                    workload.span(),
                    "workload.kind",
                    "missing: which workload, one of the kinds in docs/scenarios.md",
                )
            })?
            .clone();
        let kind_name = kind_v.get_ref().as_str().unwrap_or("");
        lines.kind = Some(c.line(kind_v.span()));
        let Some(kind) = KINDS
            .iter()
            .copied()
            .flatten()
            .find(|k| k.name == kind_name)
        else {
            let kinds: Vec<&str> = KINDS.iter().copied().flatten().map(|k| k.name).collect();
            return Err(c.err(
                kind_v.span(),
                "workload.kind",
                format!(
                    "unknown workload kind `{kind_name}`; known kinds: {}",
                    kinds.join(", ")
                ),
            ));
        };
        let shared = Shared {
            profile: &profile,
            iommu: iommu_cfg.as_ref().map(|(cfg, _)| cfg),
            dir,
        };
        let w = (kind.parse)(&c, workload, &shared)?;

        let device = match (&f.device, w.uses_dma_api()) {
            (Some(_), true) if w.own_devices() => {
                return Err(InputError::at(
                    file,
                    text,
                    Some(kind_v.span()),
                    "device",
                    format!(
                        "a {} workload names its devices itself (in [workload]): remove [device]",
                        w.kind()
                    ),
                ));
            }
            (None, true) if w.own_devices() => crate::device::Device::new("none", true, 64),
            (Some(d), true) => {
                lines.mask = Some(c.line(d.dma_mask_bits.span()));
                lines.numa_node = d.numa_node.as_ref().map(|n| c.line(n.span()));
                device(&c, d)?
            }
            (None, true) => {
                return Err(InputError::at(
                    file,
                    text,
                    Some(doc_span),
                    "device",
                    format!(
                        "missing: a {} workload drives a device; give a [device] section",
                        w.kind()
                    ),
                ));
            }
            (Some(_), false) => {
                return Err(InputError::at(
                    file,
                    text,
                    Some(kind_v.span()),
                    "device",
                    format!(
                        "a {} workload calls the iommu core directly, with no device: remove [device], or use a streaming workload to drive a device through iommu-dma",
                        w.kind()
                    ),
                ));
            }
            (None, false) => crate::device::Device::new("iommu-core", true, 64),
        };

        let swiotlb = match &f.swiotlb {
            Some(sec) => {
                if !w.uses_swiotlb() {
                    return Err(InputError::at(
                        file,
                        text,
                        Some(kind_v.span()),
                        "swiotlb",
                        format!(
                            "a {} workload sets up no bounce pool; [swiotlb] applies to forwarding and bounce workloads",
                            w.kind()
                        ),
                    ));
                }
                if let Some(a) = &sec.areas {
                    lines.areas = Some(c.line(a.span()));
                }
                swiotlb_spec(&c, sec)?
            }
            None => SwiotlbSpec::default(),
        };

        let boot = match &f.boot {
            Some(b) => boot_section(&c, b, &mut lines)?,
            None => CmaBoot::default(),
        };

        let (iommu, iommu_given) = match iommu_cfg {
            Some((cfg, given)) => (Some(cfg), given),
            None => (None, iommu::IommuGiven::default()),
        };
        let mut s = Scenario {
            name: f.scenario.name,
            file: file.to_string(),
            policies: Policies::preset(
                kernel,
                &Target::of(
                    &profile,
                    iommu.is_some(),
                    w.uses_swiotlb(),
                    w.uses_dma_api(),
                )
                .with_pci_device(w.pci_device())
                .with_iova_alloc(w.allocates_iovas()),
            ),
            profile,
            kernel,
            kernel_origin,
            overrides,
            device,
            swiotlb,
            iommu,
            iommu_given,
            workload: w,
            boot,
            lines,
            profile_sets: Vec::new(),
            source: std::rc::Rc::new((file.to_string(), text.to_string(), dir.to_path_buf())),
        };
        s.resolve()?;
        Ok(s)
    }
}

fn device(c: &Ctx, d: &DeviceSection) -> Result<crate::device::Device, InputError> {
    let bits = *d.dma_mask_bits.get_ref();
    if !(12..=64).contains(&bits) {
        return Err(c.err(
            d.dma_mask_bits.span(),
            "device.dma_mask_bits",
            format!("must be 12..=64, found {bits}"),
        ));
    }
    let mut device = crate::device::Device::new(&d.name, d.coherent, bits as u32);
    if let Some(n) = &d.numa_node {
        let v = *n.get_ref();
        if !(0..=1023).contains(&v) {
            return Err(c.err(
                n.span(),
                "device.numa_node",
                format!("must be 0..=1023, found {v}"),
            ));
        }
        device.numa_node = Some(v as u32);
    }
    Ok(device)
}

/// Read `[boot]` as the kernel reads its command line: `early_cma()`, `early_cma_pernuma()`
/// (`memparse`), `early_numa_cma()`. Whether the release has each parameter, and whether the
/// areas fit the platform's memory, are checked at resolve (an override can change both).
fn boot_section(c: &Ctx, b: &BootSection, lines: &mut Lines) -> Result<CmaBoot, InputError> {
    let mut boot = CmaBoot::default();
    if let Some(v) = &b.cma {
        lines.boot_cma = Some(c.line(v.span()));
        boot.cma = Some(
            CmaCmdline::parse(v.get_ref().trim()).map_err(|m| c.err(v.span(), "boot.cma", m))?,
        );
    }
    if let Some(v) = &b.cma_pernuma {
        lines.boot_cma_pernuma = Some(c.line(v.span()));
        boot.cma_pernuma = match memparse(v.get_ref().trim()) {
            Some((n, "")) => Some(n),
            _ => {
                return Err(c.err(
                    v.span(),
                    "boot.cma_pernuma",
                    format!(
                        "expected a size such as \"32M\" or \"0x2000000\", found \"{}\"",
                        v.get_ref()
                    ),
                ));
            }
        };
    }
    if let Some(v) = &b.numa_cma {
        lines.boot_numa_cma = Some(c.line(v.span()));
        boot.numa_cma =
            parse_numa_cma(v.get_ref().trim()).map_err(|m| c.err(v.span(), "boot.numa_cma", m))?;
    }
    if let Some(v) = &b.cma_size_mbytes {
        lines.boot_cma = lines.boot_cma.or(Some(c.line(v.span())));
        boot.size_mbytes = c.int(v, "boot.cma_size_mbytes", 0..=(1 << 20))?;
    }
    Ok(boot)
}

fn swiotlb_spec(c: &Ctx, sec: &SwiotlbSection) -> Result<SwiotlbSpec, InputError> {
    use crate::dma::swiotlb::{IO_TLB_MAX_MAPPING, IO_TLB_SEGSIZE, SwiotlbError};
    let mut spec = SwiotlbSpec::default();
    if let Some(v) = &sec.size {
        let n = c.size(v.get_ref(), v.span(), "swiotlb.size")?;
        if !n.is_multiple_of(IO_TLB_MAX_MAPPING) {
            return Err(c.err(
                v.span(),
                "swiotlb.size",
                SwiotlbError::BadSize(n).to_string(),
            ));
        }
        if n > MAX_SWIOTLB {
            return Err(c.err(
                v.span(),
                "swiotlb.size",
                format!("at most {} MiB in the model", MAX_SWIOTLB >> 20),
            ));
        }
        spec.size = n;
    }
    if let Some(f) = sec.force {
        spec.force = f;
    }
    if let Some(a) = &sec.areas {
        let n = c.int(a, "swiotlb.areas", 1..=1024)? as u32;
        if !n.is_power_of_two() {
            return Err(c.err(
                a.span(),
                "swiotlb.areas",
                SwiotlbError::AreasNotPowerOfTwo(n).to_string(),
            ));
        }
        let nslabs = spec.size >> crate::dma::swiotlb::IO_TLB_SHIFT;
        if !nslabs.is_multiple_of(u64::from(n) * IO_TLB_SEGSIZE as u64) {
            return Err(c.err(
                a.span(),
                "swiotlb.areas",
                SwiotlbError::TooManyAreas { nareas: n, nslabs }.to_string(),
            ));
        }
        spec.areas = Some(n);
    }
    Ok(spec)
}
