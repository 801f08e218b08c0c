// The engines' pipeline records (../shared/anchors/engines.py: DeepGEMM's logits kernels
// and FlashInfer's top-k, timed on the same GPU as `winnow bench`), read from their JSON
// lines. One object per line:
//
//   {"workload": "dsa-prefill", "impl": "deepgemm-logits", "params": {"Q": 8192, ...},
//    "ms_median": 7.72, "gpu": "NVIDIA H100 80GB HBM3", ...}
//
// A line with "note" and no "workload" is a progress note; a record with "error" (such as
// "OOM") was not timed. Both are kept aside, so the caller can say what was skipped.
// The parser is strict JSON (plus Python's NaN and Infinity, which json.dumps writes):
// anything else is an AnchorFileError naming the file and the line.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace winnow::tools {

// A file that cannot be read or does not hold records: "FILE:LINE: what is wrong".
class AnchorFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A params value: a number, a string, true/false, or null (monostate).
using AnchorValue = std::variant<std::monostate, double, std::string, bool>;
// Params in the order written; keys are unique.
using AnchorParams = std::vector<std::pair<std::string, AnchorValue>>;

struct AnchorRecord {
  int line = 0;  // 1-based line in the file
  std::string workload, impl;
  AnchorParams params;
  double ms_median = 0;              // > 0 and finite where error is empty
  std::string error;                 // the record's "error" ("OOM"); empty: timed
  std::optional<std::string> gpu;    // the card it was timed on, where given
};

struct AnchorNote {
  int line = 0;
  std::string text;  // the note's text
};

struct AnchorFile {
  std::string path;
  std::vector<AnchorRecord> records;  // timed records and error records, in file order
  std::vector<AnchorNote> notes;
  int timed() const;   // records without an error
  int failed() const;  // records with one
};

// "Q=8192 T=65536": params as key=value, strings unquoted.
std::string params_text(const AnchorParams& params);

// The records of `text`, the content of the file `path` (named in errors). Blank lines are
// skipped. Throws AnchorFileError for a line that is not a JSON object, a record without a
// string workload and impl, an object params or a positive finite ms_median (or an error),
// two timed records of the same workload, impl and params, and a file without any timed
// record.
AnchorFile parse_anchor_records(const std::string& text, const std::string& path);

// parse_anchor_records of the file's content; AnchorFileError when it cannot be read.
AnchorFile read_anchor_records(const std::string& path);

}  // namespace winnow::tools
