#include "runtime/tuning_db.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <mutex>

#include "runtime/cache_fs.h"
#include "runtime/log.h"

namespace winnow::rt {

namespace {

using cache_fs::Fd;
using cache_fs::Kind;

constexpr const char* kFolder = "tuning";
constexpr const char* kFile = "tuning.sqlite3";
constexpr int kBusyTimeoutMs = 10000;  // writers wait for each other instead of failing

struct Closer {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Connection = std::unique_ptr<sqlite3, Closer>;

struct Finalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Statement = std::unique_ptr<sqlite3_stmt, Finalizer>;

// An SQLite failure, with the database's message.
struct DbError {
  std::string what;
};

[[noreturn]] void fail(sqlite3* db, const std::string& doing) {
  throw DbError{fmt::format("{}: {}", doing, sqlite3_errmsg(db))};
}

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw DbError{fmt::format("{}: {}", sql, msg)};
  }
}

// PRAGMA journal_mode=WAL on a new file. Changing the journal mode needs the file to
// itself, and SQLite answers SQLITE_BUSY at once (no busy handler) while another process
// that opened it at the same moment holds a read lock: retried for up to kBusyTimeoutMs.
void set_wal(sqlite3* db) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (;;) {
    const int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc & 0xFF) != SQLITE_BUSY || std::chrono::steady_clock::now() >= until)
      fail(db, "PRAGMA journal_mode=WAL");
    sqlite3_sleep(5);
  }
}

Statement prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) fail(db, sql);
  return Statement(s);
}

int user_version(sqlite3* db) {
  Statement s = prepare(db, "PRAGMA user_version");
  if (sqlite3_step(s.get()) != SQLITE_ROW) fail(db, "PRAGMA user_version");
  return sqlite3_column_int(s.get(), 0);
}

// Tables of the file other than ours: a version-0 file that holds them is someone else's.
int foreign_tables(sqlite3* db) {
  Statement s = prepare(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                            "name <> 'plans'");
  if (sqlite3_step(s.get()) != SQLITE_ROW) fail(db, "reading the schema");
  return sqlite3_column_int(s.get(), 0);
}

// A transaction rolled back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) { exec(db_, "BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (db_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec(db_, "COMMIT");
    db_ = nullptr;
  }
 private:
  sqlite3* db_;
};

}  // namespace

struct TuningDb::State {
  std::mutex mu;
  bool warned = false;
  std::optional<std::string> problem;

  void warn(const std::filesystem::path& file, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!problem) problem = why;
    if (warned) return;
    warned = true;
    log(LogLevel::Warn, fmt::format("the tuning database {} is not used ({}); plans come from "
                                    "the heuristics",
                                    file.string(), why));
  }
};

TuningDb::TuningDb(std::filesystem::path cache_root)
    : root_(std::move(cache_root)), state_(std::make_unique<State>()) {}
TuningDb::~TuningDb() = default;

std::filesystem::path TuningDb::file() const { return root_ / kFolder / kFile; }

std::optional<std::string> TuningDb::problem() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->problem;
}

namespace {

enum class Access { Read, Write };

// The trusted folder that holds the file (created for writes); a missing one for a read
// is nullopt with `why` empty.
std::optional<Fd> tuning_folder(const std::filesystem::path& root, Access access,
                                std::string* why) {
  if (access == Access::Write && !cache_fs::make_folders(root, why)) return std::nullopt;
  Fd r = cache_fs::open_folder(root);
  if (!r) {
    if (errno != ENOENT || access == Access::Write)
      *why = fmt::format("{} cannot be opened as a folder: {}", root.string(),
                         cache_fs::errno_text(errno));
    return std::nullopt;
  }
  struct stat st{};
  if (fstat(r.get(), &st) != 0) {
    *why = fmt::format("fstat {}: {}", root.string(), cache_fs::errno_text(errno));
    return std::nullopt;
  }
  if (std::string d = cache_fs::distrust(st); !d.empty()) {
    *why = fmt::format("{}: {}", root.string(), d);
    return std::nullopt;
  }
  Fd t;
  if (access == Access::Write) {
    t = cache_fs::make_folder_at(r.get(), kFolder, why);
    if (!t) return std::nullopt;
  } else {
    const Kind k = cache_fs::kind_at(r.get(), kFolder);
    if (k == Kind::Missing) return std::nullopt;
    t = cache_fs::open_folder_at(r.get(), kFolder);
    if (!t) {
      *why = fmt::format("{}/{} is {}", root.string(), kFolder, cache_fs::kind_words(k));
      return std::nullopt;
    }
  }
  if (fstat(t.get(), &st) != 0 || !cache_fs::distrust(st).empty()) {
    *why = fmt::format("{}/{}: {}", root.string(), kFolder, cache_fs::distrust(st));
    return std::nullopt;
  }
  return t;
}

// An open connection to a trusted file, schema checked (and made, for writes). nullopt
// with `why` empty: nothing there to read.
Connection open_db(const std::filesystem::path& root, const std::filesystem::path& file,
                   Access access, std::string* why) {
  std::optional<Fd> folder = tuning_folder(root, access, why);
  if (!folder) return nullptr;
  const Kind k = cache_fs::kind_at(folder->get(), kFile);
  if (k == Kind::Missing) {
    if (access == Access::Read) return nullptr;
    // Made here, mode 0600, so that SQLite never creates it with the umask's mode.
    std::string problem;
    if (!cache_fs::write_new(folder->get(), kFile, "", &problem) &&
        cache_fs::kind_at(folder->get(), kFile) != Kind::RegularFile) {
      *why = problem;
      return nullptr;
    }
  } else if (k != Kind::RegularFile) {
    *why = fmt::format("{} is {}", file.string(), cache_fs::kind_words(k));
    return nullptr;
  }
  struct stat st{};
  if (fstatat(folder->get(), kFile, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    *why = fmt::format("stat {}: {}", file.string(), cache_fs::errno_text(errno));
    return nullptr;
  }
  if (std::string d = cache_fs::distrust(st); !d.empty()) {
    *why = fmt::format("{}: {}", file.string(), d);
    return nullptr;
  }
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_FULLMUTEX;
  const int rc = sqlite3_open_v2(file.c_str(), &raw, flags, nullptr);
  Connection db(raw);
  if (rc != SQLITE_OK) {
    *why = fmt::format("cannot open it: {}", raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
    return nullptr;
  }
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
  int version = 0;
  try {
    version = user_version(db.get());
    if (version == 0 && foreign_tables(db.get()) > 0) {
      *why = "it holds tables that are not winnow's";
      return nullptr;
    }
    if (version == 0 && access == Access::Write) {
      set_wal(db.get());
      Transaction t(db.get());
      if (user_version(db.get()) == 0) {
        exec(db.get(), "CREATE TABLE IF NOT EXISTS plans (key TEXT PRIMARY KEY, op TEXT NOT NULL, "
                       "params TEXT NOT NULL, time_us REAL NOT NULL, heuristic_us REAL NOT NULL, "
                       "timings TEXT NOT NULL, created INTEGER NOT NULL)");
        exec(db.get(), fmt::format("PRAGMA user_version = {}", kTuningSchemaVersion).c_str());
      }
      t.commit();
      version = user_version(db.get());
    }
  } catch (const DbError& e) {
    *why = fmt::format("damaged: {}", e.what);
    return nullptr;
  }
  if (version == 0) return nullptr;  // empty: made by a writer that has not finished
  if (version != kTuningSchemaVersion) {
    *why = fmt::format("schema version {}, this winnow reads version {}", version,
                       kTuningSchemaVersion);
    return nullptr;
  }
  return db;
}

TunedRecord record_of(sqlite3_stmt* s, int first) {
  const auto text = [&](int c) {
    const unsigned char* t = sqlite3_column_text(s, c);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  };
  TunedRecord r;
  r.params = text(first);
  r.time_us = sqlite3_column_double(s, first + 1);
  r.heuristic_us = sqlite3_column_double(s, first + 2);
  r.timings = text(first + 3);
  r.created = sqlite3_column_int64(s, first + 4);
  return r;
}

}  // namespace

std::optional<TunedRecord> TuningDb::find(const TuningKey& key) const {
  std::string why;
  Connection db = open_db(root_, file(), Access::Read, &why);
  if (!db) {
    if (!why.empty()) state_->warn(file(), why);
    return std::nullopt;
  }
  try {
    Statement s = prepare(db.get(), "SELECT params, time_us, heuristic_us, timings, created "
                                    "FROM plans WHERE key = ?1");
    const std::string k = key.text();
    sqlite3_bind_text(s.get(), 1, k.c_str(), int(k.size()), SQLITE_TRANSIENT);
    const int rc = sqlite3_step(s.get());
    if (rc == SQLITE_DONE) return std::nullopt;
    if (rc != SQLITE_ROW) fail(db.get(), "reading a plan");
    return record_of(s.get(), 0);
  } catch (const DbError& e) {
    state_->warn(file(), "damaged: " + e.what);
    return std::nullopt;
  }
}

bool TuningDb::store(const TuningKey& key, const TunedRecord& record) const {
  std::string why;
  Connection db = open_db(root_, file(), Access::Write, &why);
  if (!db) {
    state_->warn(file(), why.empty() ? "it could not be made" : why);
    return false;
  }
  try {
    Transaction t(db.get());
    Statement s = prepare(db.get(), "INSERT OR REPLACE INTO plans (key, op, params, time_us, "
                                    "heuristic_us, timings, created) VALUES (?1, ?2, ?3, ?4, ?5, "
                                    "?6, ?7)");
    const std::string k = key.text();
    sqlite3_bind_text(s.get(), 1, k.c_str(), int(k.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(s.get(), 2, key.op.c_str(), int(key.op.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(s.get(), 3, record.params.c_str(), int(record.params.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_double(s.get(), 4, record.time_us);
    sqlite3_bind_double(s.get(), 5, record.heuristic_us);
    sqlite3_bind_text(s.get(), 6, record.timings.c_str(), int(record.timings.size()),
                      SQLITE_TRANSIENT);
    const int64_t now = record.created != 0
                            ? record.created
                            : std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
    sqlite3_bind_int64(s.get(), 7, now);
    if (sqlite3_step(s.get()) != SQLITE_DONE) fail(db.get(), "writing a plan");
    t.commit();
    return true;
  } catch (const DbError& e) {
    state_->warn(file(), "damaged: " + e.what);
    return false;
  }
}

std::vector<TuningDb::Row> TuningDb::list(const std::string& op) const {
  std::vector<Row> rows;
  std::string why;
  Connection db = open_db(root_, file(), Access::Read, &why);
  if (!db) {
    if (!why.empty()) state_->warn(file(), why);
    return rows;
  }
  try {
    Statement s = prepare(db.get(), "SELECT key, op, params, time_us, heuristic_us, timings, "
                                    "created FROM plans WHERE ?1 = '' OR op = ?1 ORDER BY key");
    sqlite3_bind_text(s.get(), 1, op.c_str(), int(op.size()), SQLITE_TRANSIENT);
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      Row r;
      r.key = reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0));
      r.op = reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 1));
      r.record = record_of(s.get(), 2);
      rows.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) fail(db.get(), "listing plans");
  } catch (const DbError& e) {
    state_->warn(file(), "damaged: " + e.what);
    rows.clear();
  }
  return rows;
}

long TuningDb::clear() const {
  std::string why;
  std::optional<Fd> folder = tuning_folder(root_, Access::Read, &why);
  if (!folder) return why.empty() ? 0 : -1;
  if (cache_fs::kind_at(folder->get(), kFile) == Kind::Missing) return 0;
  Connection db = open_db(root_, file(), Access::Read, &why);
  if (db) {
    try {
      Transaction t(db.get());
      exec(db.get(), "DELETE FROM plans");
      const long removed = long(sqlite3_changes(db.get()));
      t.commit();
      return removed;
    } catch (const DbError& e) {
      why = "damaged: " + e.what;
    }
  }
  if (why.empty()) return 0;  // an empty file: nothing recorded
  // Not ours to read (damaged, another version): the files go, never through a symlink.
  if (cache_fs::kind_at(folder->get(), kFile) != Kind::RegularFile) return -1;
  for (const char* name : {"tuning.sqlite3-wal", "tuning.sqlite3-shm"}) {
    if (cache_fs::kind_at(folder->get(), name) == Kind::RegularFile)
      unlinkat(folder->get(), name, 0);
  }
  return unlinkat(folder->get(), kFile, 0) == 0 ? 0 : -1;
}

}  // namespace winnow::rt
