// The kernel cache: content keys, the environment registry, the on-disk store shared by
// many processes, and the memory -> disk -> compile lookup.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "runtime/env.h"
#include "runtime/kernel_cache.h"
#include "runtime/sha256.h"
#include "tests/cache_support.h"

using namespace winnow::rt;
using namespace winnow::cache_test;
namespace fs = std::filesystem;

namespace {

ContentKeyInputs sample_inputs() {
  ContentKeyInputs in;
  in.build_id = "0123456789ab";
  in.template_hashes = "filter.cuh=aa\nselect.cuh=bb\n";
  in.backend = "nvrtc 13.0";
  in.arch = "sm_90a";
  in.options = "-lineinfo";
  in.program = "ip(q,k) topk(2048)";
  return in;
}

}  // namespace

TEST_CASE("sha256_hex matches the standard test vector", "[cache]") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("the environment registry declares each variable once", "[cache]") {
  std::set<std::string> names;
  for (const Switch& v : switch_registry()) {
    CHECK(names.insert(v.name).second);
    CHECK(std::string(v.doc).size() > 0);
  }
  for (const char* name :
       {"WINNOW_CACHE_DIR", "WINNOW_DISABLE_DISK_CACHE", "WINNOW_DUMP_DIR", "WINNOW_LOG_LEVEL",
        "WINNOW_NVRTC_OPTIONS", "WINNOW_FORCE_ARCH", "XDG_CACHE_HOME", "HOME"})
    CHECK(names.count(name) == 1);
  // Built at run time, so that the [lint] scan of env_get calls does not see a literal.
  const std::string undeclared = std::string("WINNOW_NOT_") + "DECLARED";
  CHECK_THROWS_AS(env_get(undeclared.c_str()), std::logic_error);
  // A macro of the templates is not an environment variable.
  CHECK_THROWS_AS(env_get(std::string("WINNOW_PHASE_CLOCKS").c_str()), std::logic_error);

  ScopedEnv opts("WINNOW_NVRTC_OPTIONS", "-G -O0");
  ScopedEnv level("WINNOW_LOG_LEVEL", "debug");
  CHECK(env_get("WINNOW_NVRTC_OPTIONS") == std::optional<std::string>("-G -O0"));
  CHECK(cache_relevant_env() == "WINNOW_NVRTC_OPTIONS=-G -O0\n");
  ScopedEnv unset("WINNOW_NVRTC_OPTIONS", nullptr);
  CHECK(!env_get("WINNOW_NVRTC_OPTIONS").has_value());
  CHECK(cache_relevant_env().empty());
  // Set but empty: no options, the key of unset.
  ScopedEnv empty("WINNOW_NVRTC_OPTIONS", "");
  CHECK(env_get("WINNOW_NVRTC_OPTIONS") == std::optional<std::string>(""));
  CHECK(cache_relevant_env().empty());
}

TEST_CASE("content_key is deterministic and covers every input", "[cache]") {
  ScopedEnv clean("WINNOW_NVRTC_OPTIONS", nullptr);
  const ContentKeyInputs base = sample_inputs();
  const std::string key = content_key(base);
  CHECK(key.size() == 64);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(content_key(base) == key);

  auto changed = [&](auto edit) {
    ContentKeyInputs in = base;
    edit(in);
    return content_key(in) != key;
  };
  CHECK(changed([](ContentKeyInputs& in) { in.schema_version = 2; }));
  CHECK(changed([](ContentKeyInputs& in) { in.build_id = "0123456789ac"; }));
  CHECK(changed([](ContentKeyInputs& in) { in.template_hashes += "x"; }));
  CHECK(changed([](ContentKeyInputs& in) { in.backend = "nvrtc 13.1"; }));
  CHECK(changed([](ContentKeyInputs& in) { in.arch = "sm_90"; }));
  CHECK(changed([](ContentKeyInputs& in) { in.options = ""; }));
  CHECK(changed([](ContentKeyInputs& in) { in.program += " "; }));
  // Moving text between adjacent fields must not collide.
  CHECK(changed([](ContentKeyInputs& in) {
    in.options = "-lineinfoip(q,k)";
    in.program = " topk(2048)";
  }));

  SECTION("a cache-relevant variable changes the key") {
    ScopedEnv opts("WINNOW_NVRTC_OPTIONS", "-G");
    CHECK(content_key(base) != key);
  }
  SECTION("a neutral variable does not") {
    ScopedEnv level("WINNOW_LOG_LEVEL", "debug");
    ScopedEnv dir("WINNOW_CACHE_DIR", "/somewhere/else");
    CHECK(content_key(base) == key);
  }
}

TEST_CASE("default_cache_dir honours WINNOW_CACHE_DIR, XDG_CACHE_HOME, HOME", "[cache]") {
  {
    ScopedEnv a("WINNOW_CACHE_DIR", "/opt/winnow-cache");
    ScopedEnv b("XDG_CACHE_HOME", "/xdg");
    CHECK(default_cache_dir() == fs::path("/opt/winnow-cache"));
  }
  {
    ScopedEnv a("WINNOW_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", "/xdg");
    CHECK(default_cache_dir() == fs::path("/xdg/winnow"));
  }
  {
    ScopedEnv a("WINNOW_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", nullptr);
    ScopedEnv c("HOME", "/home/someone");
    CHECK(default_cache_dir() == fs::path("/home/someone/.cache/winnow"));
  }
  const std::string uid = std::to_string(::geteuid());
  {
    ScopedEnv a("WINNOW_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", nullptr);
    ScopedEnv c("HOME", nullptr);
    ScopedEnv d("TMPDIR", "/scratch");
    CHECK(default_cache_dir() == fs::path("/scratch/winnow-cache-" + uid));
    ScopedEnv e("TMPDIR", nullptr);
    CHECK(default_cache_dir() == fs::path("/tmp/winnow-cache-" + uid));
  }
}

TEST_CASE("DiskStore round trip", "[cache]") {
  winnow::test::TempDir dir;
  DiskStore store(dir.path);
  CHECK(!store.load(kId).has_value());  // cold: a quiet miss
  const auto cubin = bytes_of(std::string("\x7f"
                                          "ELF",
                                          4) +
                              std::string(5000, '\x42'));
  REQUIRE(store.store(kId, cubin, "ip topk k=2048\nsecond line"));
  CHECK(fs::exists(entry_dir(dir.path, kArch, kKey) / "kernel.cubin"));
  CHECK(fs::exists(entry_dir(dir.path, kArch, kKey) / "meta.txt"));
  auto loaded = store.load(kId);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == cubin);
  // A second store of the same key keeps the one entry.
  CHECK(store.store(kId, cubin, "again"));
  auto entries = store.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].valid);
  CHECK(entries[0].bytes == cubin.size());
  CHECK(entries[0].description == "ip topk k=2048\nsecond line");
}

TEST_CASE("a damaged entry is a miss with one warning, and CubinCache recompiles", "[cache]") {
  winnow::test::TempDir dir;
  const auto cubin = bytes_of(std::string(4096, 'c'));
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return cubin;
  };
  {
    CubinCache cache{DiskStore(dir.path)};
    CHECK(cache.get(kId, "d", compile).from == CubinCache::Result::From::Compiled);
    CHECK(cache.get(kId, "d", compile).from == CubinCache::Result::From::Memory);
    CHECK(compiles == 1);
  }
  const fs::path file = entry_dir(dir.path, kArch, kKey) / "kernel.cubin";

  auto damage_then_get = [&](auto damage) {
    damage();
    CHECK(!DiskStore(dir.path).load(kId).has_value());
    CubinCache fresh{DiskStore(dir.path)};
    StderrCapture err;
    auto r = fresh.get(kId, "d", compile);
    std::string text = err.finish();
    CHECK(r.from == CubinCache::Result::From::Compiled);
    CHECK(r.cubin == cubin);
    CHECK(count_lines_starting(text, "winnow: warning:") == 1);
    // The recompiled cubin replaced the damaged entry.
    CubinCache again{DiskStore(dir.path)};
    CHECK(again.get(kId, "d", compile).from == CubinCache::Result::From::Disk);
  };
  SECTION("truncated") {
    damage_then_get([&] { fs::resize_file(file, 100); });
    CHECK(compiles == 2);
  }
  SECTION("corrupted, same size") {
    damage_then_get([&] {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(2000);
      f.put('X');
    });
    CHECK(compiles == 2);
  }
  SECTION("cubin missing") {
    damage_then_get([&] { fs::remove(file); });
    CHECK(compiles == 2);
  }
  SECTION("meta missing") {
    damage_then_get([&] { fs::remove(file.parent_path() / "meta.txt"); });
    CHECK(compiles == 2);
  }
}

TEST_CASE("many processes fill one cache entry at once", "[cache]") {
  winnow::test::TempDir dir;
  const auto cubin = bytes_of(std::string(20000, 'p') + "end");
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::vector<pid_t> children;
  for (int i = 0; i < 6; ++i) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: wait for the gate so that all six start together; never return to Catch.
      ::close(gate[1]);
      char c;
      while (::read(gate[0], &c, 1) > 0) {
      }
      bool ok = false;
      try {
        CubinCache cache{DiskStore(dir.path)};
        auto r = cache.get(kId, "shared", [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          return cubin;
        });
        ok = r.cubin == cubin && DiskStore(dir.path).load(kId) == cubin;
      } catch (...) {
      }
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);  // open the gate
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  DiskStore store(dir.path);
  auto entries = store.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].valid);
  CHECK(store.load(kId) == cubin);
  for (const auto& e : fs::directory_iterator(dir.path / "v1" / kArch))
    CHECK(e.path().filename() == kKey);  // no temporary folders left
}

TEST_CASE("threads share one CubinCache", "[cache]") {
  winnow::test::TempDir dir;
  CubinCache cache{DiskStore(dir.path)};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string key = std::string(63, 'b') + char('0' + (i + t) % 10);
        auto r = cache.get(id_of(key), "t", [&] { return bytes_of(key); });
        if (r.cubin != bytes_of(key)) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(DiskStore(dir.path).list().size() == 10);
}

TEST_CASE("an unwritable cache folder still returns the compiled cubin", "[cache]") {
  winnow::test::TempDir dir;
  const auto cubin = bytes_of("compiled bytes");
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return cubin;
  };
  auto check_memory_only = [&](const fs::path& root) {
    compiles = 0;
    DiskStore store(root);
    {
      StderrCapture err;
      CHECK(!store.store(kId, cubin, "d"));
      CHECK(count_lines_starting(err.finish(), "winnow: warning:") == 1);
    }
    CubinCache cache{DiskStore(root)};
    StderrCapture err;
    auto r = cache.get(kId, "d", compile);
    CHECK(r.from == CubinCache::Result::From::Compiled);
    CHECK(r.cubin == cubin);
    auto again = cache.get(kId, "d", compile);
    CHECK(again.from == CubinCache::Result::From::Memory);
    CHECK(again.cubin == cubin);
    CHECK(compiles == 1);
    CHECK(count_lines_starting(err.finish(), "winnow: warning:") == 1);
    CHECK(store.list().empty());
    CHECK(store.verify(true).bad == 0);
    CHECK(store.clear().removed == 0);
  };
  SECTION("the root's parent is a regular file") {
    std::ofstream(dir.path / "file") << "not a folder";
    check_memory_only(dir.path / "file" / "cache");
  }
  SECTION("the root is a regular file") {
    std::ofstream(dir.path / "file") << "not a folder";
    check_memory_only(dir.path / "file");
  }
  SECTION("a read-only folder (only when not root: root ignores permissions)") {
    if (::geteuid() == 0) return;
    fs::path ro = dir.path / "ro";
    fs::create_directories(ro);
    ::chmod(ro.c_str(), 0555);
    check_memory_only(ro);
    ::chmod(ro.c_str(), 0755);
  }
}

TEST_CASE("no disk store keeps cubins in memory only", "[cache]") {
  CubinCache cache{std::nullopt};
  CHECK(cache.disk() == nullptr);
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return bytes_of("x");
  };
  CHECK(cache.get(kId, "d", compile).from == CubinCache::Result::From::Compiled);
  CHECK(cache.get(kId, "d", compile).from == CubinCache::Result::From::Memory);
  CHECK(compiles == 1);
}

TEST_CASE("list, verify and clear", "[cache]") {
  winnow::test::TempDir dir;
  DiskStore store(dir.path);
  const std::string k1(64, '1'), k2(64, '2'), k3(64, '3');
  REQUIRE(store.store(id_of(k1), bytes_of("one"), "first"));
  REQUIRE(store.store(id_of(k2), bytes_of("two"), "second"));
  REQUIRE(store.store(id_of(k3, "sm_100a"), bytes_of("three"), "third"));
  CHECK(store.list().size() == 3);
  CHECK(store.verify(false).bad == 0);

  fs::resize_file(entry_dir(dir.path, "sm_90a", k2) / "kernel.cubin", 1);
  // A crashed writer's temporary folder is never listed.
  fs::create_directories(dir.path / "v1" / "sm_90a" / (".tmp-" + k1 + "-1-dead"));
  auto entries = store.list();
  REQUIRE(entries.size() == 3);
  int valid = 0;
  for (const auto& e : entries) {
    valid += e.valid;
    if (e.key == k3) {
      CHECK(e.arch == "sm_100a");
      CHECK(e.description == "third");
      CHECK(e.bytes == 5);
    }
    if (e.key == k2) CHECK(!e.valid);
  }
  CHECK(valid == 2);

  CHECK(store.verify(false).bad == 1);
  CHECK(store.list().size() == 3);
  auto fixed = store.verify(true);
  CHECK(fixed.bad == 1);
  CHECK(fixed.removed == 1);
  CHECK(fixed.skipped.empty());
  CHECK(store.list().size() == 2);
  CHECK(store.verify(false).bad == 0);
  auto cleared = store.clear();
  CHECK(cleared.removed == 2);
  CHECK(cleared.skipped.empty());
  CHECK(store.list().empty());
  CHECK(!store.load(id_of(k1)).has_value());
}

TEST_CASE("CubinCache::find gives memory and disk hits and never compiles", "[cache]") {
  winnow::test::TempDir dir;
  const CubinId id{"sm_90a", std::string(64, 'a'), "nvrtc 13.0"};
  CubinCache cache(DiskStore(dir.path));
  CHECK_FALSE(cache.find(id));
  int compiles = 0;
  const std::vector<char> cubin(256, 'x');
  cache.get(id, "test", [&] {
    ++compiles;
    return cubin;
  });
  REQUIRE(compiles == 1);
  const auto memory = cache.find(id);
  REQUIRE(memory);
  CHECK(memory->from == CubinCache::Result::From::Memory);
  CHECK(memory->cubin == cubin);
  CubinCache other(DiskStore(dir.path));  // another process's view: the disk
  const auto disk = other.find(id);
  REQUIRE(disk);
  CHECK(disk->from == CubinCache::Result::From::Disk);
  CHECK(disk->cubin == cubin);
  CHECK(other.find(id)->from == CubinCache::Result::From::Memory);
  CHECK(compiles == 1);
}
