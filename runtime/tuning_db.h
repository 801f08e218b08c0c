// The tuning database: tuned plans keyed by runtime/tuning_key.h, in SQLite beside the
// kernel cache (<cache root>/tuning/tuning.sqlite3) under the same ownership rules: the
// root and the tuning folder must be real folders (not symlinks) owned by this user and
// not writable by others, and the database file a regular file of this user's.
//
// SQLite because several processes may tune and read at once: WAL journaling (readers
// never block the writer), one transaction per record (BEGIN IMMEDIATE, so a reader
// never sees half a record) and a busy timeout instead of failures under contention.
//
// A missing database is a silent miss. A damaged one, one of another schema version or an
// untrusted folder is a miss with one warning (runtime/log.h) per TuningDb; store then
// refuses (returns false) rather than overwrite what it does not understand. Read at plan
// build and by `winnow tune`; execute never touches it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tuning_key.h"

namespace winnow::rt {

struct TunedRecord {
  std::string params;       // the op's point as text (ops/topk/topk_space.h parses it)
  double time_us = 0;       // the winner's median
  double heuristic_us = 0;  // the heuristic plan's median in the same run (0: not timed)
  std::string timings;      // every candidate's timings, one line each
  int64_t created = 0;      // Unix seconds
};

class TuningDb {
 public:
  explicit TuningDb(std::filesystem::path cache_root);
  ~TuningDb();
  TuningDb(const TuningDb&) = delete;
  TuningDb& operator=(const TuningDb&) = delete;

  std::filesystem::path file() const;  // <root>/tuning/tuning.sqlite3
  std::optional<TunedRecord> find(const TuningKey& key) const;
  // Inserts or replaces the key's record in one transaction; false (with the warning)
  // when the database cannot or may not be written.
  bool store(const TuningKey& key, const TunedRecord& record) const;

  struct Row {
    std::string key;  // TuningKey::text()
    std::string op;
    TunedRecord record;
  };
  // Every record, or those of one op ("" for all), ordered by key.
  std::vector<Row> list(const std::string& op = "") const;
  // Removes every record; a damaged or foreign-version database file (and its -wal and
  // -shm files) is deleted instead. The number of records removed, -1 on failure.
  long clear() const;
  // Why the database was not used, once an access found out (the warning's text).
  std::optional<std::string> problem() const;

 private:
  struct State;
  std::filesystem::path root_;
  std::unique_ptr<State> state_;
};

}  // namespace winnow::rt
