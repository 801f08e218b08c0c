// The kernel cache as a code-loading surface: each attack of issue 11 section 2 planted
// in a temporary cache, and what winnow must do about it.
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>

#include "ops/common/jit_module.h"
#include "runtime/sha256.h"
#include "tests/cache_support.h"
#include "tests/tool_run.h"
#include "winnow.h"

using namespace winnow::rt;
using namespace winnow::cache_test;
namespace fs = std::filesystem;

namespace {

const std::string k1(64, '1'), k2(64, '2'), k3(64, '3'), k4(64, '4');

// Every file and link under `root` -> its contents (or link target), not following links.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string rel = fs::relative(it->path(), root).string();
    if (it->is_symlink()) {
      out[rel] = "-> " + fs::read_symlink(it->path()).string();
    } else if (it->is_regular_file()) {
      std::ifstream in(it->path(), std::ios::binary);
      out[rel] = sha256_hex(std::string(std::istreambuf_iterator<char>(in), {}));
    } else {
      out[rel] = "folder";
    }
  }
  return out;
}

bool reported(const std::vector<DiskStore::Skipped>& skipped, const fs::path& path) {
  for (const auto& s : skipped)
    if (s.path == path.string()) return true;
  return false;
}

int mode_of(const fs::path& p) {
  struct stat st;
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// The uid and gid of `nobody`, when this process may act as it (it runs as root).
std::optional<std::pair<uid_t, gid_t>> other_user() {
  if (::geteuid() != 0) return std::nullopt;
  const passwd* pw = ::getpwnam("nobody");
  if (!pw || pw->pw_uid == 0) return std::nullopt;
  return std::make_pair(pw->pw_uid, pw->pw_gid);
}

// Runs `body` in a child process limited to 10 s and 2 GiB of address space, so a read
// that blocks or does not end fails the test instead of hanging it or exhausting the
// machine. The child's exit code, or -1 when it was killed.
int run_bounded(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(10);
    const rlimit limit{rlim_t(2) << 30, rlim_t(2) << 30};
    ::setrlimit(RLIMIT_AS, &limit);
    int rc = 3;
    try {
      rc = body();
    } catch (...) {
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `body` in a child process as `nobody`: its exit code, -1 when it could not drop.
int run_as(std::pair<uid_t, gid_t> user, const std::function<bool()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgid(user.second) != 0 || ::setuid(user.first) != 0) ::_exit(100);
    ::_exit(body() ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A folder that looks like a cache: entries k1 (valid) and k2 (truncated, so bad), and a
// file of its owner's. A sweep that followed a link into it would delete them.
struct Victim {
  TempDir dir;
  std::map<std::string, std::string> before;
  Victim() {
    DiskStore store(dir.path);
    REQUIRE(store.store(id_of(k1), bytes_of("victim one"), "victim"));
    REQUIRE(store.store(id_of(k2), bytes_of("victim two"), "victim"));
    fs::resize_file(entry_dir(dir.path, kArch, k2) / "kernel.cubin", 3);
    std::ofstream(dir.path / "thesis.tex") << "years of work";
    before = snapshot(dir.path);
  }
  fs::path entry(const std::string& key) const { return entry_dir(dir.path, kArch, key); }
  bool intact() const { return snapshot(dir.path) == before; }
};

}  // namespace

TEST_CASE("clear and verify --fix never follow a symlink out of the cache", "[cache]") {
  Victim victim;
  TempDir dir;
  fs::path root = dir.path / "cache";
  fs::create_directories(root);
  fs::path planted;         // what the sweeps must leave in place and report
  bool verify_reports = true;  // false where the planted folder is a valid entry
  size_t own_entries = 0;      // real entries of the cache that the sweeps must remove

  SECTION("the root is a symlink") {
    root = dir.path / "link";
    fs::create_directory_symlink(victim.dir.path, root);
    planted = root;
  }
  SECTION("the schema folder is a symlink") {
    planted = root / "v1";
    fs::create_directory_symlink(victim.dir.path / "v1", planted);
  }
  SECTION("an arch folder is a symlink") {
    REQUIRE(DiskStore(root).store(id_of(k3, "sm_100a"), bytes_of("mine"), "own"));
    own_entries = 1;
    planted = root / "v1" / kArch;
    fs::create_directory_symlink(victim.dir.path / "v1" / kArch, planted);
  }
  SECTION("entry folders are symlinks") {
    REQUIRE(DiskStore(root).store(id_of(k3), bytes_of("mine"), "own"));
    own_entries = 1;
    planted = entry_dir(root, kArch, k1);
    fs::create_directory_symlink(victim.entry(k1), planted);
    fs::create_directory_symlink(victim.entry(k2), entry_dir(root, kArch, k2));
  }
  SECTION("an entry holds a link to a folder beside its files") {
    REQUIRE(DiskStore(root).store(id_of(k1), bytes_of("mine"), "own"));
    planted = entry_dir(root, kArch, k1);
    verify_reports = false;
    fs::create_directory_symlink(victim.dir.path, planted / "data");
  }
  SECTION("an entry's files are links to the victim's") {
    REQUIRE(DiskStore(root).store(id_of(k1), bytes_of("mine"), "own"));
    own_entries = 1;  // removing the links themselves is fine: the files stay
    const fs::path e = entry_dir(root, kArch, k1);
    fs::remove(e / "kernel.cubin");
    fs::create_symlink(victim.entry(k1) / "kernel.cubin", e / "kernel.cubin");
  }
  SECTION("a key-named folder without a meta.txt of winnow's") {
    planted = entry_dir(root, kArch, k4);
    fs::create_directories(planted);
    std::ofstream(planted / "kernel.cubin") << "not winnow's";
  }

  DiskStore store(root);
  const auto verified = store.verify(true);
  const auto cleared = store.clear();
  CHECK(victim.intact());
  CHECK(verified.removed + cleared.removed == own_entries);
  if (!planted.empty()) {
    CHECK(reported(verified.skipped, planted) == verify_reports);
    CHECK(reported(cleared.skipped, planted));
    CHECK(fs::exists(fs::symlink_status(planted)));
  }
  // The victim's own entries are untouched and still load from the victim's cache.
  CHECK(DiskStore(victim.dir.path).load(id_of(k1)) == bytes_of("victim one"));
}

TEST_CASE("an entry copied under another key, arch or backend is not loaded", "[cache]") {
  TempDir dir;
  DiskStore store(dir.path);
  const auto max_h = bytes_of("max_h's cubin");
  REQUIRE(store.store(id_of(k1), max_h, "max_h(dot(h))"));
  CubinId wrong;
  std::string says;
  SECTION("another key") {
    fs::create_directories(entry_dir(dir.path, kArch, k2));
    fs::copy(entry_dir(dir.path, kArch, k1), entry_dir(dir.path, kArch, k2));
    wrong = id_of(k2);
    says = "another key";
  }
  SECTION("another arch") {
    fs::create_directories(entry_dir(dir.path, "sm_100a", k1));
    fs::copy(entry_dir(dir.path, kArch, k1), entry_dir(dir.path, "sm_100a", k1));
    wrong = id_of(k1, "sm_100a");
    says = "records the arch 'sm_90a'";
  }
  SECTION("another backend") {
    wrong = {kArch, k1, "nvrtc 12.8"};
    says = "records the backend 'nvrtc 13.0'";
  }
  {
    StderrCapture err;
    CHECK(!store.load(wrong).has_value());
    const std::string text = err.finish();
    CHECK(count_lines_starting(text, "winnow: warning:") == 1);
    CHECK_THAT(text, Catch::Contains(says));
  }
  // The cache compiles instead and replaces the misplaced entry with its own.
  const auto relu_mh = bytes_of("relu_mh's cubin");
  CubinCache cache{DiskStore(dir.path)};
  StderrCapture err;
  auto got = cache.get(wrong, "relu_mh", [&] { return relu_mh; });
  CHECK(got.from == CubinCache::Result::From::Compiled);
  CHECK(got.cubin == relu_mh);
  CHECK(DiskStore(dir.path).load(wrong) == relu_mh);
  CHECK(count_lines_starting(err.finish(), "winnow: warning:") == 1);
}

TEST_CASE("verify reports a copied entry as bad and --fix removes it", "[cache]") {
  TempDir dir;
  DiskStore store(dir.path);
  REQUIRE(store.store(id_of(k1), bytes_of("one"), "one"));
  fs::create_directories(entry_dir(dir.path, kArch, k2));
  fs::copy(entry_dir(dir.path, kArch, k1), entry_dir(dir.path, kArch, k2));
  const auto listing = store.scan();
  REQUIRE(listing.entries.size() == 2);
  CHECK(listing.entries[0].valid);
  CHECK(!listing.entries[1].valid);
  CHECK(store.verify(false).bad == 1);
  const auto fixed = store.verify(true);
  CHECK(fixed.removed == 1);
  CHECK(!fs::exists(entry_dir(dir.path, kArch, k2)));
  CHECK(store.load(id_of(k1)) == bytes_of("one"));
}

TEST_CASE("a cache root others can write or another user owns is not trusted", "[cache]") {
  TempDir dir;
  fs::path root = dir.path / "cache";
  REQUIRE(DiskStore(root).store(id_of(k1), bytes_of("planted"), "planted"));
  std::string says;
  SECTION("writable by others") {
    ::chmod(root.c_str(), 0777);
    says = "writable by group or others (mode 0777)";
  }
  SECTION("writable by the group") {
    ::chmod(root.c_str(), 0770);
    says = "writable by group or others (mode 0770)";
  }
  SECTION("owned by another user") {
    auto user = other_user();
    if (!user) {
      WARN("section skipped: not root, cannot give a folder to another user");
      return;
    }
    REQUIRE(::chown(root.c_str(), user->first, user->second) == 0);
    says = "owned by uid " + std::to_string(user->first);
  }
  SECTION("a symlink to a trusted folder") {
    const fs::path link = dir.path / "link";
    fs::create_directory_symlink(root, link);
    root = link;
    says = "symlink";
  }
  const auto before = snapshot(dir.path);
  int compiles = 0;
  CubinCache cache{DiskStore(root)};
  StderrCapture err;
  for (const auto& key : {k1, k2}) {
    auto got = cache.get(id_of(key), "d", [&] {
      ++compiles;
      return bytes_of("compiled");
    });
    CHECK(got.from == CubinCache::Result::From::Compiled);
  }
  CHECK(compiles == 2);
  CHECK(!cache.disk()->store(id_of(k3), bytes_of("x"), "d"));
  const std::string text = err.finish();
  CHECK(count_lines_starting(text, "winnow: warning:") == 1);
  CHECK_THAT(text, Catch::Contains(says));
  CHECK_THAT(text, Catch::Contains("memory only"));
  CHECK(cache.disk()->refusal().has_value());
  CHECK(snapshot(dir.path) == before);  // nothing written
}

TEST_CASE("a folder below the root that others can write is not trusted", "[cache]") {
  TempDir dir;
  DiskStore store(dir.path);
  REQUIRE(store.store(id_of(k1), bytes_of("planted"), "planted"));
  fs::path loosened;
  SECTION("the schema folder") { loosened = dir.path / "v1"; }
  SECTION("the arch folder") { loosened = dir.path / "v1" / kArch; }
  SECTION("the entry folder") { loosened = entry_dir(dir.path, kArch, k1); }
  ::chmod(loosened.c_str(), 0777);
  StderrCapture err;
  CHECK(!store.load(id_of(k1)).has_value());
  const std::string text = err.finish();
  CHECK(count_lines_starting(text, "winnow: warning:") == 1);
  CHECK_THAT(text, Catch::Contains("writable by group or others"));
}

TEST_CASE("without HOME the cache is TMPDIR/winnow-cache-<uid>, made 0700 and checked",
          "[cache]") {
  TempDir tmp;  // stands in for /tmp: anyone may create names in it
  ::chmod(tmp.path.c_str(), 01777);
  ScopedEnv a("WINNOW_CACHE_DIR", nullptr);
  ScopedEnv b("XDG_CACHE_HOME", nullptr);
  ScopedEnv c("HOME", nullptr);
  ScopedEnv d("TMPDIR", tmp.path.c_str());
  const fs::path fallback = tmp.path / ("winnow-cache-" + std::to_string(::geteuid()));
  REQUIRE(default_cache_dir() == fallback);

  // What a folder made before must get: no disk cache, one warning, nothing written.
  auto check_refused = [&](const std::string& says) {
    CubinCache cache{DiskStore(default_cache_dir())};
    StderrCapture err;
    CHECK(cache.get(kId, "d", [] { return bytes_of("compiled"); }).from ==
          CubinCache::Result::From::Compiled);
    const std::string text = err.finish();
    CHECK(count_lines_starting(text, "winnow: warning:") == 1);
    CHECK_THAT(text, Catch::Contains(says));
    CHECK(fs::is_empty(fallback));
  };
  SECTION("made by winnow") {
    const mode_t old_mask = ::umask(0);  // the mode must not depend on the umask
    CHECK(DiskStore(default_cache_dir()).store(kId, bytes_of("one"), "one"));
    ::umask(old_mask);
    CHECK(mode_of(fallback) == 0700);
    CHECK(DiskStore(default_cache_dir()).load(kId) == bytes_of("one"));
  }
  SECTION("made before, writable by others") {
    fs::create_directory(fallback);
    ::chmod(fallback.c_str(), 0777);
    check_refused("writable by group or others");
  }
  SECTION("made before by another user") {
    if (auto user = other_user()) {
      REQUIRE(run_as(*user, [&] { return ::mkdir(fallback.c_str(), 0700) == 0; }) == 0);
      check_refused("owned by uid " + std::to_string(user->first));
    } else {
      WARN("section skipped: not root, cannot act as another user");
    }
  }
}

TEST_CASE("the cache makes its folders 0700 and its files 0600", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path / "a" / "b" / "cache";
  const mode_t old_mask = ::umask(0);  // a default mode would show as 0777 / 0666
  const bool stored = DiskStore(root).store(kId, bytes_of("cubin"), "d");
  ::umask(old_mask);
  REQUIRE(stored);
  for (const fs::path& folder : {dir.path / "a", dir.path / "a" / "b", root, root / "v1",
                                 root / "v1" / kArch, entry_dir(root, kArch, kKey)})
    CHECK(mode_of(folder) == 0700);
  for (const char* file : {"kernel.cubin", "meta.txt"})
    CHECK(mode_of(entry_dir(root, kArch, kKey) / file) == 0600);
}

TEST_CASE("a cache file that is a device, a FIFO or too big is refused unread", "[cache]") {
  TempDir dir;
  DiskStore store(dir.path);
  REQUIRE(store.store(kId, bytes_of("a cubin"), "d"));
  const fs::path entry = entry_dir(dir.path, kArch, kKey);
  std::string says;
  SECTION("kernel.cubin is a symlink to /dev/zero") {
    fs::remove(entry / "kernel.cubin");
    fs::create_symlink("/dev/zero", entry / "kernel.cubin");
    says = "kernel.cubin is a symlink";
  }
  SECTION("meta.txt is a symlink to /dev/zero") {
    fs::remove(entry / "meta.txt");
    fs::create_symlink("/dev/zero", entry / "meta.txt");
    says = "meta.txt is a symlink";
  }
  SECTION("kernel.cubin is a FIFO") {
    fs::remove(entry / "kernel.cubin");
    REQUIRE(::mkfifo((entry / "kernel.cubin").c_str(), 0600) == 0);
    says = "kernel.cubin is not a regular file";
  }
  SECTION("kernel.cubin is a character device like /dev/zero") {
    fs::remove(entry / "kernel.cubin");
    if (::mknod((entry / "kernel.cubin").c_str(), S_IFCHR | 0600, makedev(1, 5)) != 0) {
      WARN("section skipped: cannot make a device node here (not root?)");
      return;
    }
    says = "kernel.cubin is not a regular file";
  }
  SECTION("kernel.cubin is above the size limit") {
    fs::resize_file(entry / "kernel.cubin", kMaxCubinBytes + 1);  // sparse: costs no disk
    says = "kernel.cubin has 67108865 bytes, above the limit of 67108864 bytes";
  }
  SECTION("meta.txt is above the size limit") {
    fs::resize_file(entry / "meta.txt", kMaxMetaBytes + 1);
    says = "above the limit of 1048576 bytes";
  }
  StderrCapture err;
  const auto start = std::chrono::steady_clock::now();
  CHECK(run_bounded([&] { return store.load(kId).has_value() ? 1 : 0; }) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  const std::string text = err.finish();
  CHECK(count_lines_starting(text, "winnow: warning:") == 1);
  CHECK_THAT(text, Catch::Contains(says));
  // verify and ls read the same way.
  CHECK(run_bounded([&] { return store.verify(false).bad == 1 ? 0 : 1; }) == 0);
}

TEST_CASE("a cubin above the size limit is not stored", "[cache]") {
  TempDir dir;
  StderrCapture err;
  CHECK(!DiskStore(dir.path).store(kId, std::vector<char>(kMaxCubinBytes + 1, 'x'), "d"));
  CHECK_THAT(err.finish(), Catch::Contains("above the limit"));
  CHECK(DiskStore(dir.path).list().empty());
}

TEST_CASE("a cached cubin the driver refuses is evicted and compiled again", "[cache]") {
  TempDir dir;
  const auto stale = bytes_of("a cubin this driver refuses");
  const auto fresh = bytes_of("a freshly compiled cubin");
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return fresh;
  };
  REQUIRE(DiskStore(dir.path).store(kId, stale, "d"));

  SECTION("from disk: evicted, compiled once, stored") {
    CubinCache cache{DiskStore(dir.path)};
    REQUIRE(cache.get(kId, "d", compile).from == CubinCache::Result::From::Disk);
    StderrCapture err;
    CHECK(cache.replace_refused(kId, stale, "CUDA_ERROR_INVALID_IMAGE", "d", compile) == fresh);
    CHECK(compiles == 1);
    const std::string text = err.finish();
    CHECK(count_lines_starting(text, "winnow: warning:") == 1);
    CHECK_THAT(text, Catch::Contains("CUDA_ERROR_INVALID_IMAGE"));
    CHECK(DiskStore(dir.path).load(kId) == fresh);
    CHECK(cache.get(kId, "d", compile).cubin == fresh);
    // A second entry point of the same module refused too: no second compile.
    CHECK(cache.replace_refused(kId, stale, "again", "d", compile) == fresh);
    CHECK(compiles == 1);
    // The compiled cubin refused as well: a real error for the caller.
    CHECK(!cache.replace_refused(kId, fresh, "still", "d", compile).has_value());
    CHECK(compiles == 1);
  }
  SECTION("compiled in this process: nothing to evict") {
    TempDir other;
    CubinCache cache{DiskStore(other.path)};
    REQUIRE(cache.get(kId, "d", compile).from == CubinCache::Result::From::Compiled);
    CHECK(!cache.replace_refused(kId, fresh, "refused", "d", compile).has_value());
    CHECK(compiles == 1);
    CHECK(DiskStore(other.path).load(kId) == fresh);
  }
  SECTION("not a cubin of this cache") {
    CubinCache cache{DiskStore(dir.path)};
    CHECK(!cache.replace_refused(kId, stale, "refused", "d", compile).has_value());
    CHECK(compiles == 0);
  }
}

namespace {

struct FakeBackend : winnow::backend::Backend {
  mutable int compiles = 0;
  std::string name() const override { return "fake"; }
  std::string version() const override { return "1.0"; }
  winnow::backend::CompileResult compile(const winnow::backend::CompileRequest& req,
                                         bool) const override {
    ++compiles;
    return {bytes_of("cubin of " + req.source), "", ""};
  }
};

}  // namespace

TEST_CASE("compile_cached offers a replacement only for cubins it did not compile", "[cache]") {
  using namespace winnow;
  TempDir dir;
  FakeBackend be;
  backend::CompileRequest req;
  req.source = "extern \"C\" __global__ void k() {}";
  req.arch = backend::parse_arch("sm_90a");
  {
    rt::CubinCache cache{DiskStore(dir.path)};
    auto m = ops::compile_cached(cache, be, req, "stem", "program", "d");
    CHECK(!m.replace_refused);  // compiled by this build
    CHECK(be.compiles == 1);
  }
  // Plant a cubin the driver would refuse under the module's own key, whole and valid.
  const auto listing = DiskStore(dir.path).list();
  REQUIRE(listing.size() == 1);
  const CubinId id{listing[0].arch, listing[0].key, "fake 1.0"};
  REQUIRE(DiskStore(dir.path).evict(id));
  REQUIRE(DiskStore(dir.path).store(id, bytes_of("garbage"), "d"));

  rt::CubinCache cache{DiskStore(dir.path)};
  auto m = ops::compile_cached(cache, be, req, "stem", "program", "d");
  CHECK(m.cubin == bytes_of("garbage"));
  REQUIRE(m.replace_refused);
  StderrCapture err;
  const auto recompiled = bytes_of("cubin of " + req.source);
  CHECK(m.replace_refused(m.cubin, "cuModuleLoadData failed") == recompiled);
  err.finish();
  CHECK(be.compiles == 2);
  CHECK(DiskStore(dir.path).load(id) == recompiled);

  CHECK(ops::load_error_may_be_the_cubin(CUDA_ERROR_INVALID_IMAGE));
  CHECK(ops::load_error_may_be_the_cubin(CUDA_ERROR_NO_BINARY_FOR_GPU));
  CHECK(ops::load_error_may_be_the_cubin(CUDA_ERROR_NOT_FOUND));
  CHECK(!ops::load_error_may_be_the_cubin(CUDA_ERROR_OUT_OF_MEMORY));
  CHECK(!ops::load_error_may_be_the_cubin(CUDA_ERROR_CONTEXT_IS_DESTROYED));
}

// `winnow cache ...`: its exit code and its output.
std::pair<int, std::string> run_tool(const std::string& args) {
  const winnow::test::ToolRun r = winnow::test::run_tool(args);
  return {r.exit_code, r.output};
}

TEST_CASE("winnow cache: a file as --dir, raw descriptions, symlinks reported", "[cache]") {
  TempDir dir;
  SECTION("--dir names a file") {
    std::ofstream(dir.path / "file") << "x";
    for (const char* action : {"ls", "clear", "verify"}) {
      auto [rc, out] = run_tool(std::string("cache ") + action + " --dir '" +
                                (dir.path / "file").string() + "'");
      CHECK(rc == 1);
      CHECK_THAT(out, Catch::Contains("is not a folder"));
    }
  }
  SECTION("control characters in a description are escaped") {
    REQUIRE(DiskStore(dir.path).store(kId, bytes_of("c"), "evil\x1b[2J\rline\nnext\x07"));
    auto [rc, out] = run_tool("cache ls --dir '" + dir.path.string() + "'");
    CHECK(rc == 0);
    CHECK(out.find('\x1b') == std::string::npos);
    CHECK(out.find('\r') == std::string::npos);
    CHECK(out.find('\x07') == std::string::npos);
    CHECK_THAT(out, Catch::Contains("evil\\x1b[2J\\x0dline\\nnext\\x07"));
  }
  SECTION("a symlinked arch folder is reported, its target kept") {
    Victim victim;
    fs::create_directories(dir.path / "v1");
    fs::create_directory_symlink(victim.dir.path / "v1" / kArch, dir.path / "v1" / kArch);
    auto [rc, out] = run_tool("cache clear --dir '" + dir.path.string() + "'");
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("left alone " + (dir.path / "v1" / kArch).string() +
                                    ": a symlink"));
    CHECK_THAT(out, Catch::Contains("removed 0 entries"));
    CHECK(victim.intact());
  }
}

TEST_CASE("a plan builds when its cached cubin is one the driver refuses", "[gpu][cache]") {
  WINNOW_REQUIRE_GPU();
  WINNOW_REQUIRE_BACKEND();
  TempDir dir;
  ScopedEnv cache_dir("WINNOW_CACHE_DIR", dir.path.c_str());
  ScopedEnv disk_on("WINNOW_DISABLE_DISK_CACHE", nullptr);
  winnowProblemDesc_t desc;
  winnowProblemDescInit(&desc);
  // Two contexts alive together: each has its own memory cache, so the second reads disk.
  winnowContext_t first = nullptr, second = nullptr;
  winnowPlan_t compiled = nullptr, reloaded = nullptr;
  INFO("last error: " << winnowGetLastError());
  REQUIRE(winnowCreate(&first, 0) == WINNOW_STATUS_SUCCESS);
  REQUIRE(winnowPlanCreate(first, &desc, &compiled) == WINNOW_STATUS_SUCCESS);
  REQUIRE(winnowPlanBuild(compiled) == WINNOW_STATUS_SUCCESS);

  // Replace the entry by a whole, correctly keyed one whose cubin is not an ELF image.
  const auto entries = DiskStore(dir.path).list();
  REQUIRE(entries.size() == 1);
  std::ifstream meta(entry_dir(dir.path, entries[0].arch, entries[0].key) / "meta.txt");
  std::string line, backend;
  while (std::getline(meta, line))
    if (line.rfind("backend=", 0) == 0) backend = line.substr(8);
  const CubinId id{entries[0].arch, entries[0].key, backend};
  REQUIRE(DiskStore(dir.path).evict(id));
  REQUIRE(DiskStore(dir.path).store(id, bytes_of("not an ELF image"), "planted"));

  StderrCapture err;
  REQUIRE(winnowCreate(&second, 0) == WINNOW_STATUS_SUCCESS);
  REQUIRE(winnowPlanCreate(second, &desc, &reloaded) == WINNOW_STATUS_SUCCESS);
  const winnowStatus_t built = winnowPlanBuild(reloaded);
  const std::string text = err.finish();
  CHECK(built == WINNOW_STATUS_SUCCESS);
  CHECK_THAT(text, Catch::Contains("the driver refused the cached kernel"));
  const auto replaced = DiskStore(dir.path).load(id);
  REQUIRE(replaced.has_value());
  CHECK(*replaced != bytes_of("not an ELF image"));
  winnowPlanDestroy(reloaded);
  winnowPlanDestroy(compiled);
  winnowDestroy(second);
  winnowDestroy(first);
}
