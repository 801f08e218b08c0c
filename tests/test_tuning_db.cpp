// The tuning database (runtime/tuning_db.h) and its keys (runtime/tuning_key.h): the bucket
// rule, records in and out, forked processes writing and reading at once, a damaged or
// foreign-version file as a miss with one warning, and the kernel cache's ownership rules.
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <set>

#include "runtime/tuning_db.h"
#include "tests/cache_support.h"

using namespace winnow;
using cache_test::StderrCapture;
using cache_test::count_lines_starting;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

rt::TuningKey key_of(int k = 2048, const std::string& shape = "h64.d128.r64.n65536") {
  rt::TuningKey key;
  key.op = "topk";
  key.score_hash = std::string(64, 'c');
  key.dtypes = "q=fp8_e4m3 k=fp8_e4m3";
  key.window = "causal/1";
  key.arch = "sm_90a";
  key.gpu = "NVIDIA H200";
  key.sm_count = 132;
  key.driver = "13000";
  key.compiler = "nvrtc 13.0";
  key.shape = shape;
  key.k_bucket = rt::k_bucket(k);
  return key;
}

rt::TunedRecord record_of(const std::string& params, double us) {
  rt::TunedRecord r;
  r.params = params;
  r.time_us = us;
  r.heuristic_us = 2 * us;
  r.timings = params + " | timed | " + std::to_string(us) + "\n";
  return r;
}

void set_user_version(const fs::path& file, int v) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
  const std::string sql = "PRAGMA user_version = " + std::to_string(v);
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("tuning key: the bucket rule", "[tune]") {
  // Sizes in (2^(b-1), 2^b] share the bucket 2^b.
  CHECK(rt::rows_bucket(1) == 1);
  CHECK(rt::rows_bucket(33) == 64);
  CHECK(rt::rows_bucket(64) == 64);
  CHECK(rt::rows_bucket(65) == 128);
  CHECK(rt::keys_bucket(1) == 1024);  // small key counts share the 1024 bucket
  CHECK(rt::keys_bucket(1024) == 1024);
  CHECK(rt::keys_bucket(40001) == 65536);
  CHECK(rt::keys_bucket(65536) == 65536);
  CHECK(rt::keys_bucket(65537) == 131072);
  CHECK(rt::keys_bucket(int64_t(1) << 20) == int64_t(1) << 20);
  CHECK(rt::k_bucket(1) == 1);
  CHECK(rt::k_bucket(2048) == 2048);
  CHECK(rt::k_bucket(2049) == 4096);
  CHECK(rt::k_bucket(8192) == 8192);
  CHECK(rt::shape_bucket(64, 128, 50000, 65536) == "h64.d128.r65536.n65536");
  CHECK(rt::shape_bucket(64, 128, 65536, 40000) == rt::shape_bucket(64, 128, 40000, 65536));
  CHECK(rt::shape_bucket(32, 128, 64, 65536) != rt::shape_bucket(64, 128, 64, 65536));
}

TEST_CASE("tuning key: every field is in the text", "[tune]") {
  const rt::TuningKey base = key_of();
  std::vector<rt::TuningKey> changed(12, base);
  changed[0].op = "block-select";
  changed[1].score_hash = std::string(64, 'd');
  changed[2].dtypes = "q=bf16 k=bf16";
  changed[3].window = "dense";
  changed[4].arch = "sm_100a";
  changed[5].gpu = "NVIDIA H100";
  changed[6].sm_count = 114;
  changed[7].driver = "12080";
  changed[8].compiler = "nvrtc 12.8";
  changed[9].schema = rt::kTuningSchemaVersion + 1;
  changed[10].shape = "h64.d128.r128.n65536";
  changed[11].k_bucket = 4096;
  std::set<std::string> texts{base.text()};
  for (const auto& k : changed) texts.insert(k.text());
  CHECK(texts.size() == 13);
}

TEST_CASE("tuning db: a record in, the same record out, other keys miss", "[tune]") {
  TempDir dir;
  rt::TuningDb db(dir.path);
  StderrCapture err;
  CHECK_FALSE(db.find(key_of()));  // no file yet: a silent miss
  REQUIRE(db.store(key_of(), record_of("a=1", 12.5)));
  const auto got = db.find(key_of());
  REQUIRE(got);
  CHECK(got->params == "a=1");
  CHECK(got->time_us == 12.5);
  CHECK(got->heuristic_us == 25);
  CHECK(got->created > 0);
  CHECK_FALSE(db.find(key_of(4096)));
  CHECK_FALSE(db.find(key_of(2048, "h64.d128.r128.n65536")));
  // A second store of the key replaces the record.
  REQUIRE(db.store(key_of(), record_of("a=2", 9)));
  CHECK(db.find(key_of())->params == "a=2");
  REQUIRE(db.store(key_of(4096), record_of("b=1", 3)));
  CHECK(db.list().size() == 2);
  CHECK(db.list("topk").size() == 2);
  CHECK(db.list("block-select").empty());
  CHECK(err.finish().empty());
  CHECK_FALSE(db.problem());
  // Folders 0700, the file 0600: the kernel cache's rules.
  struct stat st{};
  REQUIRE(stat((dir.path / "tuning").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(stat(db.file().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(db.clear() == 2);
  CHECK(db.list().empty());
  CHECK_FALSE(db.find(key_of()));
}

TEST_CASE("tuning db: forked processes write and read at once", "[tune]") {
  TempDir dir;
  constexpr int kWriters = 4, kReaders = 2, kEach = 40;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters + kReaders; ++w) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int bad = 0;
      rt::TuningDb db(dir.path);
      for (int i = 0; i < kEach; ++i) {
        if (w < kWriters) {
          // Every writer also rewrites one shared key: last writer wins, whole records.
          const std::string p = "w=" + std::to_string(w) + " i=" + std::to_string(i);
          const std::string own = "w" + std::to_string(w) + ".i" + std::to_string(i);
          if (!db.store(key_of(2048, own), record_of(p, w * 1000 + i))) ++bad;
          if (!db.store(key_of(8192), record_of(p, w * 1000 + i))) ++bad;
        } else {
          // A reader sees no record or a whole one: params and time agree.
          if (auto r = db.find(key_of(8192))) {
            const int wr = std::stoi(r->params.substr(2));
            const int ir = std::stoi(r->params.substr(r->params.find("i=") + 2));
            if (r->time_us != wr * 1000 + ir) ++bad;
          }
          db.list();
        }
      }
      if (db.problem()) ++bad;
      _exit(bad == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  rt::TuningDb db(dir.path);
  // Every writer's keys are there, each with its own record, and the shared one.
  CHECK(db.list().size() == size_t(kWriters * kEach + 1));
  for (int w = 0; w < kWriters; ++w) {
    const auto r = db.find(key_of(2048, "w" + std::to_string(w) + ".i7"));
    REQUIRE(r);
    CHECK(r->params == "w=" + std::to_string(w) + " i=7");
  }
  const auto shared = db.find(key_of(8192));
  REQUIRE(shared);
  CHECK_THAT(shared->params, Catch::Contains("i=" + std::to_string(kEach - 1)));
  CHECK_FALSE(db.problem());
}

TEST_CASE("tuning db: a damaged file is a miss with one warning", "[tune]") {
  TempDir dir;
  {
    rt::TuningDb db(dir.path);
    REQUIRE(db.store(key_of(), record_of("a=1", 1)));
  }
  const fs::path file = dir.path / "tuning" / "tuning.sqlite3";
  fs::remove(file.string() + "-wal");
  fs::remove(file.string() + "-shm");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "this is not an SQLite database, though it is long enough to look like a header"
        << std::string(4096, 'x');
  }
  rt::TuningDb db(dir.path);
  StderrCapture err;
  CHECK_FALSE(db.find(key_of()));
  CHECK_FALSE(db.find(key_of()));
  CHECK(db.list().empty());
  CHECK_FALSE(db.store(key_of(), record_of("a=2", 2)));  // never overwrites what it cannot read
  const std::string text = err.finish();
  CHECK(count_lines_starting(text, "winnow: warn") == 1);
  CHECK_THAT(text, Catch::Contains("tuning database"));
  REQUIRE(db.problem());
  CHECK_THAT(*db.problem(), Catch::Contains("damaged"));
  // clear removes what it cannot read; then the database works again.
  CHECK(db.clear() == 0);
  CHECK_FALSE(fs::exists(file));
  rt::TuningDb fresh(dir.path);
  CHECK(fresh.store(key_of(), record_of("a=3", 3)));
  CHECK(fresh.find(key_of())->params == "a=3");
}

TEST_CASE("tuning db: another schema version is a miss with one warning", "[tune]") {
  TempDir dir;
  {
    rt::TuningDb db(dir.path);
    REQUIRE(db.store(key_of(), record_of("a=1", 1)));
  }
  set_user_version(dir.path / "tuning" / "tuning.sqlite3", rt::kTuningSchemaVersion + 1);
  rt::TuningDb db(dir.path);
  StderrCapture err;
  CHECK_FALSE(db.find(key_of()));
  CHECK_FALSE(db.store(key_of(), record_of("a=2", 2)));
  CHECK(db.list().empty());
  const std::string text = err.finish();
  CHECK(count_lines_starting(text, "winnow: warn") == 1);
  CHECK_THAT(text, Catch::Contains("schema version " + std::to_string(rt::kTuningSchemaVersion + 1)));
}

TEST_CASE("tuning db: someone else's SQLite file is not used", "[tune]") {
  TempDir dir;
  fs::create_directories(dir.path / "tuning");
  fs::permissions(dir.path / "tuning", fs::perms::owner_all);
  sqlite3* other = nullptr;
  REQUIRE(sqlite3_open((dir.path / "tuning" / "tuning.sqlite3").c_str(), &other) == SQLITE_OK);
  REQUIRE(sqlite3_exec(other, "CREATE TABLE photos (id INTEGER)", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(other);
  rt::TuningDb db(dir.path);
  StderrCapture err;
  CHECK_FALSE(db.store(key_of(), record_of("a=1", 1)));
  CHECK_THAT(err.finish(), Catch::Contains("not winnow's"));
}

TEST_CASE("tuning db: the kernel cache's ownership rules", "[tune]") {
  SECTION("a symlinked database file is refused") {
    TempDir dir, elsewhere;
    {
      rt::TuningDb db(elsewhere.path);
      REQUIRE(db.store(key_of(), record_of("a=1", 1)));
    }
    fs::create_directories(dir.path / "tuning");
    fs::permissions(dir.path / "tuning", fs::perms::owner_all);
    fs::create_symlink(elsewhere.path / "tuning" / "tuning.sqlite3",
                       dir.path / "tuning" / "tuning.sqlite3");
    rt::TuningDb db(dir.path);
    StderrCapture err;
    CHECK_FALSE(db.find(key_of()));
    CHECK_THAT(err.finish(), Catch::Contains("symlink"));
  }
  SECTION("a folder others can write is refused") {
    TempDir dir;
    {
      rt::TuningDb db(dir.path);
      REQUIRE(db.store(key_of(), record_of("a=1", 1)));
    }
    fs::permissions(dir.path / "tuning", fs::perms::others_write, fs::perm_options::add);
    rt::TuningDb db(dir.path);
    StderrCapture err;
    CHECK_FALSE(db.find(key_of()));
    CHECK_FALSE(db.store(key_of(), record_of("a=2", 2)));
    const std::string text = err.finish();
    CHECK(count_lines_starting(text, "winnow: warn") == 1);
    CHECK_THAT(text, Catch::Contains("writable"));
  }
}
