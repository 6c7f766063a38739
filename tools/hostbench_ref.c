/*
 * hostbench_ref.c: the plain-C reference for `dmasim hostbench` (x86-64 only).
 *
 * It times the same thing as src/hostbench.rs without any of dmasim's layers: a page-aligned
 * buffer cut into equal entries; per iteration and per mode, one write per cache line (untimed,
 * so every line is dirty), then one timed pass issuing CLFLUSHOPT (or CLWB) on every line with
 *   per-entry: an SFENCE after each entry   (<= 7.0: each region's sync waits)
 *   batched:   one SFENCE after the list     (7.1: arch_sync_dma_flush once per call)
 * The modes alternate which goes first, after one untimed warm-up pass of each. Reported: median
 * and min per mode, and the median-based reduction 100 * (1 - batched / per_entry), as JSON.
 *
 * Build: cc -O2 -o hostbench_ref tools/hostbench_ref.c
 * Usage: hostbench_ref [--buffer 10M] [--entry 4K] [--iterations 50] [--instruction clflushopt|clwb]
 * Exit status 2 on a bad option or a CPU without the instruction.
 */
#define _POSIX_C_SOURCE 200809L
#include <cpuid.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int use_clwb;

static inline void maint(const char *p)
{
	if (use_clwb)
		__asm__ volatile("clwb %0" : : "m"(*(const volatile char *)p) : "memory");
	else
		__asm__ volatile("clflushopt %0" : : "m"(*(const volatile char *)p) : "memory");
}

static inline void sfence(void)
{
	__asm__ volatile("sfence" : : : "memory");
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long n = strtoull(s, &end, 10);
	uint64_t mult = 1;
	if (end == s || s[0] == '-')
		return -1;
	if (*end == 'K' || *end == 'k')
		mult = 1ull << 10, end++;
	else if (*end == 'M' || *end == 'm')
		mult = 1ull << 20, end++;
	else if (*end == 'G' || *end == 'g')
		mult = 1ull << 30, end++;
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -1;
	*out = n * mult;
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof *v, cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double minimum(const double *v, unsigned n)
{
	double m = v[0];
	for (unsigned i = 1; i < n; i++)
		if (v[i] < m)
			m = v[i];
	return m;
}

static unsigned char seed;

static void dirty(char *buf, uint64_t bytes, uint64_t line)
{
	seed++;
	for (uint64_t i = 0; i < bytes; i += line)
		((volatile char *)buf)[i] = (char)(seed + i / line);
}

/* One timed pass. */
static double pass(char *buf, uint64_t bytes, uint64_t entry, uint64_t line, int batched)
{
	dirty(buf, bytes, line);
	uint64_t t0 = now_ns();
	for (uint64_t e = 0; e < bytes; e += entry) {
		for (uint64_t off = 0; off < entry; off += line)
			maint(buf + e + off);
		if (!batched)
			sfence();
	}
	if (batched)
		sfence();
	return (double)(now_ns() - t0);
}

static int usage(const char *why)
{
	fprintf(stderr, "hostbench_ref: %s\n", why);
	return 2;
}

int main(int argc, char **argv)
{
	uint64_t buffer = 10ull << 20, entry = 4096, iterations = 50;
	unsigned a = 0, b = 0, c = 0, d = 0;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			return usage("option needs a value");
		if (!strcmp(argv[i], "--buffer")) {
			if (parse_size(v, &buffer))
				return usage("--buffer: not a size");
		} else if (!strcmp(argv[i], "--entry")) {
			if (parse_size(v, &entry))
				return usage("--entry: not a size");
		} else if (!strcmp(argv[i], "--iterations")) {
			if (parse_size(v, &iterations))
				return usage("--iterations: not a count");
		} else if (!strcmp(argv[i], "--instruction")) {
			if (!strcmp(v, "clwb"))
				use_clwb = 1;
			else if (strcmp(v, "clflushopt"))
				return usage("--instruction: clflushopt or clwb");
		} else {
			return usage("unknown option");
		}
		i++;
	}
	/* CPUID leaf 1 EBX[15:8]: CLFLUSH line size in 8-byte units; leaf 7 EBX bits 23/24. */
	__get_cpuid(1, &a, &b, &c, &d);
	uint64_t line = ((b >> 8) & 0xff) * 8;
	if (!line)
		line = 64;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << (use_clwb ? 24 : 23))))
		return usage(use_clwb ? "unsupported: this CPU has no CLWB"
				       : "unsupported: this CPU has no CLFLUSHOPT");
	if (!buffer || !entry || !iterations)
		return usage("--buffer, --entry and --iterations must be positive");
	if (entry % line)
		return usage("--entry is not a multiple of the cache line");
	if (buffer % entry)
		return usage("--buffer is not a multiple of --entry");

	char *buf = aligned_alloc(4096, buffer);
	double *s[2];
	s[0] = malloc(iterations * sizeof(double));
	s[1] = malloc(iterations * sizeof(double));
	if (!buf || !s[0] || !s[1])
		return usage("out of memory");
	memset(buf, 0, buffer);

	pass(buf, buffer, entry, line, 0);
	pass(buf, buffer, entry, line, 1);
	for (uint64_t i = 0; i < iterations; i++) {
		int first = i % 2; /* 0: per-entry first, 1: batched first */
		for (int k = 0; k < 2; k++) {
			int batched = first ^ k;
			s[batched][i] = pass(buf, buffer, entry, line, batched);
		}
	}
	const char *name = use_clwb ? "clwb" : "clflushopt";
	double min_pe = minimum(s[0], iterations), min_b = minimum(s[1], iterations);
	double med_pe = median(s[0], iterations), med_b = median(s[1], iterations);
	printf("{\n  \"buffer_bytes\": %llu,\n  \"entry_bytes\": %llu,\n  \"entries\": %llu,\n"
	       "  \"iterations\": %llu,\n  \"modes\": [\n",
	       (unsigned long long)buffer, (unsigned long long)entry,
	       (unsigned long long)(buffer / entry), (unsigned long long)iterations);
	printf("    {\"mode\": \"per-entry\", \"instruction\": \"%s\", \"median_ns\": %.1f, \"min_ns\": %.1f},\n",
	       name, med_pe, min_pe);
	printf("    {\"mode\": \"batched\", \"instruction\": \"%s\", \"median_ns\": %.1f, \"min_ns\": %.1f}\n",
	       name, med_b, min_b);
	printf("  ],\n  \"reduction_pct\": %.2f\n}\n", 100.0 * (1.0 - med_b / med_pe));
	free(buf);
	free(s[0]);
	free(s[1]);
	return 0;
}
