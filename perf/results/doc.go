// Package results is the file format shared by termfence's failover measurements
// (docs/PERFORMANCE.md, "Result files"): which system was measured, in which
// scenario, under which timing, and every sample in milliseconds.
//
// A file is one JSON object:
//
//	{
//	  "version": 1,
//	  "results": [
//	    {
//	      "system": "termfence",
//	      "scenario": "crash",
//	      "heartbeat_timeout_ms": 100,
//	      "samples_ms": [201.4, 187.9, 240.2]
//	    }
//	  ]
//	}
//
// Guarantees: Decode accepts exactly what Encode writes for the same Version;
// it refuses unknown fields, other versions, empty sample lists and negative,
// NaN or infinite numbers, so a typo in a producer fails loudly instead of
// producing an empty plot. WriteFile replaces the file atomically (temporary file,
// fsync, rename). Quantiles use the nearest-rank method on the samples as
// recorded; nothing is interpolated, smoothed or dropped.
//
// Non-guarantees: the package does not know how a sample was measured; the
// producer states that in Result.Params and in docs/PERFORMANCE.md. With n
// samples, percentiles above 100·(n−1)/n are the maximum (p99 of 20 samples is
// the largest one). Results from different machines are not comparable, and
// nothing here checks that they came from the same one (see Result.Host).
//
// The package uses only the standard library, so a producer in any module can
// copy the JSON shape without importing it.
package results
