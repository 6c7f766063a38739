//! The kernel tool's command line: the options one run of `dma_map_benchmark` was given.
//!
//! Kernel counterpart: the `getopt` loop of tools/dma/dma_map_benchmark.c (its `-t -s -n -b -d
//! -x -g` and 7.1's `-m`), and the `struct map_benchmark` it fills for the module.
//!
//! What it models: the options as values, read from a command line as the tool's `getopt` reads
//! it (`-t 4` or `-t4`), and the map_benchmark scenario they describe on a platform and release.
//! `dmasim map-benchmark` and `dmasim fit` both build their scenarios here, so a row fitted from
//! a board's run and the same run on the model are the same scenario.
//!
//! Invariants: the defaults are the tool's (one thread, 20 seconds, any node, 32-bit mask,
//! bidirectional, no delay, one page); each value is checked against the tool's and the
//! module's limits before a scenario is written.

use super::{MAX_GRANULE, MAX_SECONDS, MAX_THREADS, MAX_TRANS_NS};

/// One run's options, as the tool takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolOptions {
    /// `-t`
    pub threads: i64,
    /// `-s`
    pub seconds: i64,
    /// `-n`, -1 for `NUMA_NO_NODE`
    pub node: i64,
    /// `-d`: 0 bidirectional, 1 to the device, 2 from it
    pub dir: i64,
    /// `-x`
    pub dma_trans_ns: i64,
    /// `-b`
    pub bits: i64,
    /// `-g`
    pub granule: i64,
    /// `-m` (7.1 on): 0 single, 1 scatter-gather; `None` where the command line has none.
    pub mode: Option<i64>,
}

impl Default for ToolOptions {
    fn default() -> ToolOptions {
        ToolOptions {
            threads: 1,
            seconds: 20,
            node: -1,
            dir: 0,
            dma_trans_ns: 0,
            bits: 32,
            granule: 1,
            mode: None,
        }
    }
}

/// The tool's direction names (its `directions[]`), by `-d`.
pub const DIRECTIONS: [&str; 3] = ["BIDIRECTIONAL", "TO_DEVICE", "FROM_DEVICE"];

impl ToolOptions {
    /// Read the options of a command line (the words after the program's name), as the tool's
    /// `getopt(argc, argv, "t:s:n:b:d:x:g:m:")` does; anything else is refused, naming it.
    pub fn parse_args<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<ToolOptions, String> {
        let mut o = ToolOptions::default();
        let mut words = words.into_iter();
        while let Some(w) = words.next() {
            let Some(flag) = w.strip_prefix('-').and_then(|f| f.chars().next()) else {
                return Err(format!("`{w}` is not one of the tool's options"));
            };
            let inline = &w[1 + flag.len_utf8()..];
            let arg = if inline.is_empty() {
                words
                    .next()
                    .ok_or_else(|| format!("-{flag} takes a value"))?
            } else {
                inline
            };
            let n: i64 = arg
                .parse()
                .map_err(|_| format!("-{flag} takes a whole number, found `{arg}`"))?;
            match flag {
                't' => o.threads = n,
                's' => o.seconds = n,
                'n' => o.node = n,
                'b' => o.bits = n,
                'd' => o.dir = n,
                'x' => o.dma_trans_ns = n,
                'g' => o.granule = n,
                'm' => o.mode = Some(n),
                _ => return Err(format!("-{flag} is not one of the tool's options")),
            }
        }
        o.check()?;
        Ok(o)
    }

    /// The tool's and the module's limits; the message names the option.
    pub fn check(&self) -> Result<(), String> {
        let within = |opt: &str, v: i64, lo: i64, hi: i64, what: &str| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!("{opt}: {what} must be {lo} to {hi}, found {v}"))
            }
        };
        within("-t", self.threads, 1, MAX_THREADS, "threads")?;
        within("-s", self.seconds, 1, MAX_SECONDS, "seconds")?;
        within("-d", self.dir, 0, 2, "the direction (0, 1 or 2)")?;
        if let Some(m) = self.mode {
            within("-m", m, 0, 1, "the map mode (0 single, 1 scatter-gather)")?;
        }
        within("-x", self.dma_trans_ns, 0, MAX_TRANS_NS, "dma_trans_ns")?;
        within("-b", self.bits, 20, 64, "the DMA mask's bits")?;
        within("-g", self.granule, 1, MAX_GRANULE, "the granule, in pages,")?;
        if self.node < -1 {
            return Err(format!(
                "-n: a node is -1 (any) or 0 and up, found {}",
                self.node
            ));
        }
        Ok(())
    }

    /// The command line, as a person would type it (every option, for rows and reports).
    pub fn command(&self) -> String {
        let mode = self.mode.map_or(String::new(), |m| format!(" -m {m}"));
        format!(
            "-t {} -s {} -n {} -d {} -x {} -b {} -g {}{mode}",
            self.threads,
            self.seconds,
            self.node,
            self.dir,
            self.dma_trans_ns,
            self.bits,
            self.granule
        )
    }

    /// The scenario of this run on `platform` (a built-in name or a profile file) under
    /// `kernel`, with the device behind the platform's IOMMU or not, coherent or not.
    pub fn scenario_text(
        &self,
        platform: &str,
        kernel: &str,
        iommu: bool,
        coherent: bool,
    ) -> String {
        let dir = ["bidirectional", "to_device", "from_device"][self.dir.clamp(0, 2) as usize];
        let quoted = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut t = format!(
            "[scenario]\nname = \"map-benchmark\"\nplatform = {}\nkernel = {}\n\n\
             [device]\nname = \"dma_map_benchmark\"\ncoherent = {coherent}\ndma_mask_bits = {}\n",
            quoted(platform),
            quoted(kernel),
            self.bits
        );
        if iommu {
            t.push_str("\n[iommu]\ngranule = \"4K\"\nias = 48\n");
        }
        let mode = match self.mode {
            Some(0) => "mode = \"single\"\n",
            Some(1) => "mode = \"sg\"\n",
            _ => "",
        };
        t.push_str(&format!(
            "\n[workload]\nkind = \"map_benchmark\"\n{mode}threads = {}\nseconds = {}\nnode = {}\ndirection = \"{dir}\"\ngranule = {}\ndma_trans_ns = {}\n",
            self.threads, self.seconds, self.node, self.granule, self.dma_trans_ns
        ));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_read_as_getopt_reads_them() {
        let o = ToolOptions::parse_args(["-t", "4", "-g256", "-d", "2", "-m", "1"]).unwrap();
        assert_eq!(
            o,
            ToolOptions {
                threads: 4,
                granule: 256,
                dir: 2,
                mode: Some(1),
                ..ToolOptions::default()
            }
        );
        assert_eq!(o.command(), "-t 4 -s 20 -n -1 -d 2 -x 0 -b 32 -g 256 -m 1");
        assert_eq!(
            ToolOptions::parse_args(o.command().split(' ')).unwrap(),
            o,
            "the command line reads back as itself"
        );
    }

    #[test]
    fn bad_options_name_the_option() {
        for (args, want) in [
            (vec!["-t", "0"], "-t: threads must be 1 to 1024, found 0"),
            (vec!["-q", "1"], "-q is not one of the tool's options"),
            (vec!["-g"], "-g takes a value"),
            (vec!["-g", "x"], "-g takes a whole number, found `x`"),
            (vec!["4"], "`4` is not one of the tool's options"),
            (
                vec!["-n", "-2"],
                "-n: a node is -1 (any) or 0 and up, found -2",
            ),
        ] {
            assert_eq!(ToolOptions::parse_args(args).unwrap_err(), want);
        }
    }
}
