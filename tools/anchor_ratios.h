// winnow's times beside the engines' records of the same problem (tools/anchor_records.h):
// the matching, the ratios, and how `winnow bench --anchors` prints and records them.
//
// A record matches a winnow row when its workload is the row's and its params are exactly
// the row's anchor params: the same keys, in any order, with equal values (65536 equals
// 65536.0). The ratio is winnow ms / anchor ms: below 1, winnow is faster.
#pragma once
#include <string>
#include <vector>

#include "tools/anchor_records.h"

namespace winnow::tools {

struct AnchorRatio {
  std::string impl;
  int line = 0;        // the record's line in the file
  double ms = 0;       // the record's ms_median; 0 where it has an error
  double ratio = 0;    // winnow ms / ms; 0 where it has an error
  std::string error;   // the record's error ("OOM"): not timed, no ratio
};

// The records of `workload` whose params are exactly `params`, in file order.
std::vector<const AnchorRecord*> matching_records(const AnchorFile& file,
                                                  const std::string& workload,
                                                  const AnchorParams& params);

// winnow_ms against each matching record.
std::vector<AnchorRatio> anchor_ratios(const AnchorFile& file, const std::string& workload,
                                       const AnchorParams& params, double winnow_ms);

// The fields a winnow JSON record gains, starting with ", ":
//   , "anchors": {"deepgemm-logits": {"ms": 7.72, "ratio": 1.8303}, "deepgemm+torch.topk":
//     {"error": "OOM"}}, "anchors_file": "anchors.jsonl"
// ("anchors": {} where nothing matched).
std::string anchor_fields(const std::string& path, const std::vector<AnchorRatio>& ratios);

// One winnow row of the anchors table; ratios empty: "no record". `why_none`, where not
// empty, replaces "no record" (e.g. "not comparable: bf16 inputs").
struct AnchorRow {
  std::string workload, size, impl;
  double winnow_ms = 0;
  std::vector<AnchorRatio> ratios;
  std::string why_none;
};

// The table printed after the bench's own, one line per (row, matching record).
std::string anchor_table(const std::string& path, const std::vector<AnchorRow>& rows);

// What reading the file found: the timed records, the notes and error records skipped.
std::string anchor_file_summary(const AnchorFile& file);

// A warning per other card the file's timed records name, where it is not `gpu` (this
// run's): their ratios would compare two cards. Empty when all name `gpu` or none.
std::string anchor_gpu_warnings(const AnchorFile& file, const std::string& gpu);

// The timed records of the rows' workloads that no row matched, grouped by workload and
// params; empty when all did.
std::string unmatched_records(const AnchorFile& file, const std::vector<AnchorRow>& rows);

}  // namespace winnow::tools
