// nvfp4-bench: times nvfp4's quantization kernels and GEMMs through the public C API,
// with no Python in the loop, next to baselines measured in the same run (device-to-device
// copy bandwidth; cuBLAS BF16 when the toolkit has it).
//
// Method (the same as python -m nvfp4.bench):
//  - every op is warmed up, then timed with CUDA events on one stream;
//  - a sample is `reps` back-to-back calls divided by reps, where reps is picked so that a
//    sample lasts at least --min-sample-us (event resolution is ~0.5 us, and small kernels
//    last a few us); the figure reported is the median of --iters samples;
//  - inputs rotate through enough copies that together they exceed 2x the L2 cache, so no
//    call finds its operands in L2 from the previous one;
//  - quantization bandwidth counts the bytes that must move at least once (read the input,
//    write codes, scales and amax); GEMM throughput counts 2*M*N*K flops.
//
// Usage: nvfp4-bench [--shapes 8192x8192x8192,16x4096x4096] [--shapes-file F] [--quick]
//                    [--ops quant,gemm] [--backends cutlass,cudnn,cublas] [--iters 30]
//                    [--warmup 5] [--min-sample-us 200] [--csv out.csv] [--device 0] [--list]
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#if defined(NVFP4_BENCH_CUDA)
#define NVFP4_HPP_CUDA_RUNTIME 1
#include <cuda_runtime_api.h>
#endif
#if defined(NVFP4_BENCH_CUBLAS)
#include <cublas_v2.h>
#endif
#include "nvfp4/nvfp4.hpp"

// The shapes file's text, compiled in by CMake (generated/nvfp4_bench_shapes.h), so the
// installed binary needs no file at a source-tree path; --shapes-file reads another.
#if __has_include("nvfp4_bench_shapes.h")
#include "nvfp4_bench_shapes.h"
#else
static const char kShapesJson[] = "";
#endif

namespace {

// =====================================================================================
// A JSON reader just large enough for the shapes file (objects, arrays, strings,
// numbers, literals); nothing may be downloaded where this runs, so no library.
// =====================================================================================

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json* get(const std::string& key) const {
    for (const auto& m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  Json parse() {
    Json v = value();
    skip();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) line += s_[k] == '\n';
    throw std::runtime_error("JSON: " + what + " at line " + std::to_string(line));
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  Json value() {
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    const char c = s_[i_];
    Json v;
    if (c == '{') {
      ++i_;
      v.kind = Json::Object;
      if (eat('}')) return v;
      do {
        skip();
        std::string key = str();
        expect(':');
        v.members.emplace_back(std::move(key), value());
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind = Json::Array;
      if (eat(']')) return v;
      do v.items.push_back(value());
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::String;
      v.string = str();
    } else if (s_.compare(i_, 4, "true") == 0 || s_.compare(i_, 5, "false") == 0) {
      v.kind = Json::Bool;
      v.boolean = s_[i_] == 't';
      i_ += v.boolean ? 4 : 5;
    } else if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
    } else {
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      v.kind = Json::Number;
      v.number = std::strtod(begin, &end);
      if (end == begin) fail("unexpected character");
      i_ += static_cast<size_t>(end - begin);
    }
    return v;
  }
  std::string str() {
    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        const char e = s_[i_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'u': i_ += 4; c = '?'; break;  // only ASCII matters here
          default: c = e; break;
        }
      }
      out += c;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
};

// =====================================================================================
// Shapes
// =====================================================================================

struct Shape {
  int64_t m = 0, n = 0, k = 0;
  std::vector<std::string> names;  // "model.layer" entries that share this (m, n, k)
  std::string label() const {
    if (names.empty()) return "-";
    return names.size() == 1 ? names[0] : names[0] + " (+" + std::to_string(names.size() - 1) + ")";
  }
};

int64_t to_int(const Json* j, const char* what) {
  if (!j || j->kind != Json::Number || j->number < 1 || j->number != std::floor(j->number))
    throw std::runtime_error(std::string("shapes file: '") + what + "' must be a positive integer");
  return static_cast<int64_t>(j->number);
}

// Flattens model x layer x m into unique (m, n, k), keeping every name that maps to each.
std::vector<Shape> load_shapes_text(const std::string& text, bool quick) {
  const Json root = JsonParser(text).parse();
  const Json* models = root.get("models");
  if (!models || models->kind != Json::Array) throw std::runtime_error("shapes file: no \"models\" array");
  std::vector<Shape> out;
  std::map<std::tuple<int64_t, int64_t, int64_t>, size_t> index;
  for (const Json& model : models->items) {
    const Json* name = model.get("name");
    const Json* ms = model.get("m");
    const Json* layers = model.get("layers");
    if (!name || name->kind != Json::String || !ms || ms->kind != Json::Array || !layers || layers->kind != Json::Array)
      throw std::runtime_error("shapes file: each model needs \"name\", \"m\" (a list) and \"layers\"");
    std::vector<int64_t> mlist;
    for (const Json& m : ms->items) mlist.push_back(to_int(&m, "m"));
    if (quick && !mlist.empty()) {
      // The smallest and the largest token count of the first model only.
      std::sort(mlist.begin(), mlist.end());
      mlist = {mlist.front(), mlist.back()};
    }
    for (const Json& layer : layers->items) {
      const Json* lname = layer.get("name");
      const int64_t n = to_int(layer.get("n"), "n"), k = to_int(layer.get("k"), "k");
      for (int64_t m : mlist) {
        const auto key = std::make_tuple(m, n, k);
        auto it = index.find(key);
        if (it == index.end()) {
          index[key] = out.size();
          out.push_back(Shape{m, n, k, {}});
          it = index.find(key);
        }
        out[it->second].names.push_back(name->string + "." + (lname ? lname->string : "?"));
      }
    }
    if (quick) break;
  }
  return out;
}

// An empty path means the shapes compiled into this binary.
std::vector<Shape> load_shapes_file(const std::string& path, bool quick) {
  if (path.empty()) {
    const std::string text = kShapesJson;
    if (text.empty()) throw std::runtime_error("this nvfp4-bench has no shapes compiled in (pass --shapes-file or --shapes)");
    return load_shapes_text(text, quick);
  }
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open shapes file " + path + " (pass --shapes-file or --shapes)");
  std::stringstream ss;
  ss << f.rdbuf();
  return load_shapes_text(ss.str(), quick);
}

// "8192x8192x8192,16x4096x4096" -> shapes (M x N x K).
std::vector<Shape> parse_shapes_arg(const std::string& arg) {
  std::vector<Shape> out;
  std::stringstream ss(arg);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    Shape s;
    char x1 = 0, x2 = 0;
    long long m = 0, n = 0, k = 0;
    std::stringstream is(item);
    if (!(is >> m >> x1 >> n >> x2 >> k) || x1 != 'x' || x2 != 'x' || m < 1 || n < 1 || k < 1)
      throw std::runtime_error("--shapes: expected MxNxK[,MxNxK...], got '" + item + "'");
    s.m = m;
    s.n = n;
    s.k = k;
    s.names.push_back(item);
    out.push_back(s);
  }
  return out;
}

// =====================================================================================
// Options
// =====================================================================================

struct Options {
  std::vector<Shape> shapes;
  std::string shapes_file;  // empty: the compiled-in copy of python/nvfp4/shapes.json
  std::string shapes_arg;
  std::string csv;
  std::set<std::string> ops = {"quant", "gemm"};
  std::set<std::string> backends = {"cutlass", "cudnn", "cublas"};
  int iters = 30;
  int warmup = 5;
  double min_sample_us = 200.0;
  int device = 0;
  bool quick = false;
  bool list = false;
};

std::set<std::string> split_set(const std::string& s) {
  std::set<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.insert(item);
  return out;
}

void usage() {
  std::printf(
      "nvfp4-bench: NVFP4 quantization and GEMM microbenchmarks (CUDA events, warm-up, L2 rotation, median)\n"
      "  --shapes MxNxK[,...]   GEMM shapes; quantization runs on x[M,K] and w[N,K]\n"
      "  --shapes-file PATH     JSON of model shapes (default: python/nvfp4/shapes.json, compiled in)\n"
      "  --quick                first model of the shapes file, smallest and largest M\n"
      "  --ops quant,gemm       what to time (default both)\n"
      "  --backends LIST        cutlass,cudnn,cublas (cublas = BF16 baseline; default all available)\n"
      "  --iters N              samples per op, median reported (default 30)\n"
      "  --warmup N             untimed calls first (default 5)\n"
      "  --min-sample-us T      calls per sample are repeated to last at least T us (default 200)\n"
      "  --csv PATH             also write every row as CSV\n"
      "  --device I             CUDA device (default 0)\n"
      "  --list                 print the shapes and exit\n");
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + ": missing value");
      return argv[++i];
    };
    if (a == "--shapes") o.shapes_arg = next();
    else if (a == "--shapes-file") o.shapes_file = next();
    else if (a == "--csv") o.csv = next();
    else if (a == "--ops") o.ops = split_set(next());
    else if (a == "--backends") o.backends = split_set(next());
    else if (a == "--iters") o.iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "--warmup") o.warmup = std::max(0, std::atoi(next().c_str()));
    else if (a == "--min-sample-us") o.min_sample_us = std::max(0.0, std::atof(next().c_str()));
    else if (a == "--device") o.device = std::atoi(next().c_str());
    else if (a == "--quick") o.quick = true;
    else if (a == "--list") o.list = true;
    else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      throw std::runtime_error("unknown argument '" + a + "' (see --help)");
    }
  }
  for (const std::string& op : o.ops)
    if (op != "quant" && op != "gemm") throw std::runtime_error("--ops: unknown op '" + op + "'");
  for (const std::string& b : o.backends)
    if (b != "cutlass" && b != "cudnn" && b != "cublas") throw std::runtime_error("--backends: unknown backend '" + b + "'");
  o.shapes = o.shapes_arg.empty() ? load_shapes_file(o.shapes_file, o.quick) : parse_shapes_arg(o.shapes_arg);
  return o;
}

// =====================================================================================
// Results: one row per timed op, printed as a table and written as CSV
// =====================================================================================

struct Row {
  std::string section;  // "copy", "quant", "gemm"
  std::string op;       // variant name
  std::string backend;  // "nvfp4", "cutlass", "cudnn", "cublas-bf16", "cudaMemcpy"
  std::string shape;    // "M x N x K" or "rows x cols"
  std::string models;
  int64_t m = 0, n = 0, k = 0;
  double bytes = 0, flops = 0;
  int iters = 0, reps = 0, sets = 0;
  double median_us = 0, min_us = 0, mean_us = 0;
  double gbps = 0, tflops = 0;
  double ratio = 0;
  std::string ratio_to;
  std::string status = "ok";
};

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

[[maybe_unused]] void write_csv(const std::string& path, const std::vector<Row>& rows, const std::string& device, int cc) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return;
  }
  f << "device,cc,section,op,backend,m,n,k,models,bytes,flops,iters,reps,sets,median_us,min_us,mean_us,gbps,tflops,"
       "ratio,ratio_to,status\n";
  for (const Row& r : rows) {
    f << csv_escape(device) << ',' << cc << ',' << r.section << ',' << csv_escape(r.op) << ',' << r.backend << ','
      << r.m << ',' << r.n << ',' << r.k << ',' << csv_escape(r.models) << ',' << r.bytes << ',' << r.flops << ','
      << r.iters << ',' << r.reps << ',' << r.sets << ',' << r.median_us << ',' << r.min_us << ',' << r.mean_us << ','
      << r.gbps << ',' << r.tflops << ',' << r.ratio << ',' << r.ratio_to << ',' << csv_escape(r.status) << '\n';
  }
  std::printf("\nwrote %zu rows to %s\n", rows.size(), path.c_str());
}

[[maybe_unused]] void print_rows(const std::vector<Row>& rows, const std::string& section) {
  bool any = false;
  for (const Row& r : rows) any |= r.section == section;
  if (!any) return;
  const bool gemm = section == "gemm";
  std::printf("\n%-28s %-12s %-22s %10s %10s %9s %s\n", section == "quant" ? "quantization" : section.c_str(),
              "backend", gemm ? "M x N x K" : "tensor", "median us", "min us", gemm ? "TFLOP/s" : "GB/s",
              gemm ? "ratio" : "vs copy");
  for (const Row& r : rows) {
    if (r.section != section) continue;
    if (r.status != "ok") {
      std::printf("%-28s %-12s %-22s  %s\n", r.op.c_str(), r.backend.c_str(), r.shape.c_str(), r.status.c_str());
      continue;
    }
    char ratio[64] = "";
    if (r.ratio > 0) std::snprintf(ratio, sizeof ratio, "%.2fx %s", r.ratio, r.ratio_to.c_str());
    std::printf("%-28s %-12s %-22s %10.2f %10.2f %9.1f %s\n", r.op.c_str(), r.backend.c_str(), r.shape.c_str(),
                r.median_us, r.min_us, gemm ? r.tflops : r.gbps, ratio);
  }
}

}  // namespace

// =====================================================================================
// GPU part
// =====================================================================================

#if defined(NVFP4_BENCH_CUDA)
namespace {

using nvfp4::cuda::Buffer;
using nvfp4::cuda::check;

struct Context {
  int device = 0;
  int cc = 0;
  std::string name;
  size_t l2_bytes = 0;
  cudaStream_t stream = nullptr;
  const Options* opt = nullptr;
  std::vector<uint16_t> host_bf16;  // random values, tiled into device inputs
  double copy_gbps = 0;
};

struct Timing {
  double median_us = 0, min_us = 0, mean_us = 0;
  int reps = 1;
};

// How many copies of a working set to cycle through so that together they exceed 2x L2,
// bounded by the memory free on the device.
int rotation_sets(const Context& ctx, double set_bytes) {
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  int sets = static_cast<int>(std::floor(2.0 * static_cast<double>(ctx.l2_bytes) / std::max(set_bytes, 1.0))) + 1;
  const int fit = static_cast<int>(0.6 * static_cast<double>(free_b) / std::max(set_bytes, 1.0));
  sets = std::min(sets, std::min(fit, 256));
  if (sets < 1) throw nvfp4::Error(NVFP4_ERROR_CUDA, "does not fit in device memory");
  return sets;
}

// Events destroyed on every path out of time_op, errors included.
struct Events {
  std::vector<cudaEvent_t> ev;
  explicit Events(size_t n) : ev(n, nullptr) {
    for (cudaEvent_t& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
  }
  ~Events() {
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// Times fn(set) as described at the top of the file.
template <class F>
Timing time_op(Context& ctx, int sets, F&& fn) {
  const Options& o = *ctx.opt;
  int idx = 0;
  for (int w = 0; w < std::max(o.warmup, 1); ++w) fn(idx++ % sets);
  check(cudaStreamSynchronize(ctx.stream), "warm-up");
  Timing t;
  {
    Events probe(2);
    check(cudaEventRecord(probe.ev[0], ctx.stream), "cudaEventRecord");
    fn(idx++ % sets);
    check(cudaEventRecord(probe.ev[1], ctx.stream), "cudaEventRecord");
    check(cudaEventSynchronize(probe.ev[1]), "cudaEventSynchronize");
    float one_ms = 0;
    check(cudaEventElapsedTime(&one_ms, probe.ev[0], probe.ev[1]), "cudaEventElapsedTime");
    const double one_us = std::max(static_cast<double>(one_ms) * 1e3, 0.5);
    t.reps = static_cast<int>(std::min(1000.0, std::max(1.0, std::ceil(o.min_sample_us / one_us))));
  }
  Events events(2 * static_cast<size_t>(o.iters));
  std::vector<cudaEvent_t>& ev = events.ev;
  for (int i = 0; i < o.iters; ++i) {
    check(cudaEventRecord(ev[2 * i], ctx.stream), "cudaEventRecord");
    for (int r = 0; r < t.reps; ++r) fn(idx++ % sets);
    check(cudaEventRecord(ev[2 * i + 1], ctx.stream), "cudaEventRecord");
  }
  check(cudaEventSynchronize(ev.back()), "cudaEventSynchronize");
  std::vector<double> us(static_cast<size_t>(o.iters));
  for (int i = 0; i < o.iters; ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
    us[i] = static_cast<double>(ms) * 1e3 / t.reps;
  }
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  t.median_us = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  t.min_us = sorted.front();
  double sum = 0;
  for (double v : us) sum += v;
  t.mean_us = sum / static_cast<double>(n);
  return t;
}

// Fills a device bf16 buffer with the random host values, tiled.
void fill_bf16(Context& ctx, void* dst, int64_t count) {
  const int64_t chunk = static_cast<int64_t>(ctx.host_bf16.size());
  for (int64_t off = 0; off < count; off += chunk) {
    const int64_t n = std::min(chunk, count - off);
    check(cudaMemcpyAsync(static_cast<uint16_t*>(dst) + off, ctx.host_bf16.data(), static_cast<size_t>(n) * 2,
                          cudaMemcpyHostToDevice, ctx.stream),
          "cudaMemcpyAsync");
  }
  check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize");
}

Row copy_baseline(Context& ctx) {
  Row r;
  r.section = "copy";
  r.op = "device-to-device copy";
  r.backend = "cudaMemcpy";
  const size_t bytes = std::max<size_t>(size_t{256} << 20, 4 * ctx.l2_bytes);
  r.shape = std::to_string(bytes >> 20) + " MiB";
  Buffer src(bytes), dst(bytes);
  check(cudaMemsetAsync(src.get(), 1, bytes, ctx.stream), "cudaMemsetAsync");
  const Timing t = time_op(ctx, 1, [&](int) {
    check(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream), "cudaMemcpyAsync");
  });
  r.bytes = 2.0 * static_cast<double>(bytes);  // read + write
  r.iters = ctx.opt->iters;
  r.reps = t.reps;
  r.sets = 1;
  r.median_us = t.median_us;
  r.min_us = t.min_us;
  r.mean_us = t.mean_us;
  r.gbps = r.bytes / (t.median_us * 1e-6) / 1e9;
  ctx.copy_gbps = r.gbps;
  return r;
}

// One quantization variant on a [rows, cols] bf16 tensor.
struct QuantVariant {
  const char* name;
  nvfp4::QuantConfig cfg;
  bool rowwise, columnwise;
};

Row bench_quant(Context& ctx, const QuantVariant& v, int64_t rows, int64_t cols, const std::string& models) {
  Row r;
  r.section = "quant";
  r.op = v.name;
  r.backend = "nvfp4";
  r.shape = std::to_string(rows) + " x " + std::to_string(cols);
  r.models = models;
  r.m = rows;
  r.k = cols;
  try {
    const nvfp4::Device dev = nvfp4::Device::cuda(ctx.device);
    const nvfp4_scale_layout_t layout = v.cfg.scale_layout();
    const nvfp4::QuantizedLayout rl = nvfp4::rowwise_layout(rows, cols, layout);
    const nvfp4::QuantizedLayout cl = nvfp4::columnwise_layout(rows, cols, layout);
    const double in_bytes = static_cast<double>(rows * cols * 2);
    double out_bytes = 0;
    if (v.rowwise) out_bytes += static_cast<double>(rl.data_bytes() + rl.scale_bytes() + 4);
    if (v.columnwise) out_bytes += static_cast<double>(cl.data_bytes() + cl.scale_bytes() + 4);
    r.bytes = in_bytes + out_bytes;
    const int sets = rotation_sets(ctx, r.bytes);
    std::vector<Buffer> in, outr, outc;
    std::vector<nvfp4::QuantizedView> vr, vc;
    for (int s = 0; s < sets; ++s) {
      in.emplace_back(static_cast<size_t>(rows * cols * 2));
      fill_bf16(ctx, in.back().get(), rows * cols);
      if (v.rowwise) {
        outr.emplace_back(rl.packed_bytes());
        vr.push_back(nvfp4::QuantizedView::carve(rl, outr.back().get(), rl.packed_bytes(), dev));
      }
      if (v.columnwise) {
        outc.emplace_back(cl.packed_bytes());
        vc.push_back(nvfp4::QuantizedView::carve(cl, outc.back().get(), cl.packed_bytes(), dev));
      }
    }
    const Timing t = time_op(ctx, sets, [&](int s) {
      const nvfp4::TensorView x(in[s].get(), NVFP4_DTYPE_BFLOAT16, {rows, cols}, dev);
      nvfp4::quantize(x, v.cfg, v.rowwise ? &vr[s] : nullptr, v.columnwise ? &vc[s] : nullptr, ctx.stream);
    });
    r.iters = ctx.opt->iters;
    r.reps = t.reps;
    r.sets = sets;
    r.median_us = t.median_us;
    r.min_us = t.min_us;
    r.mean_us = t.mean_us;
    r.gbps = r.bytes / (t.median_us * 1e-6) / 1e9;
    if (ctx.copy_gbps > 0) {
      r.ratio = r.gbps / ctx.copy_gbps;
      r.ratio_to = "of copy";
    }
  } catch (const std::exception& e) {
    r.status = std::string("error: ") + e.what();
    cudaGetLastError();
  }
  return r;
}

#if defined(NVFP4_BENCH_CUBLAS)
const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "alloc failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "arch mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
  }
}
void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw nvfp4::Error(NVFP4_ERROR_CUDA, std::string(what) + ": " + cublas_status_name(s));
}

// D[M,N] = A[M,K] @ B[N,K]^T in BF16 with FP32 accumulation: the dense baseline an FP4
// GEMM has to beat. Row-major D is column-major D^T = B @ A^T, hence the swapped operands.
Row bench_cublas(Context& ctx, const Shape& s) {
  Row r;
  r.section = "gemm";
  r.op = "bf16 gemm";
  r.backend = "cublas-bf16";
  r.shape = std::to_string(s.m) + " x " + std::to_string(s.n) + " x " + std::to_string(s.k);
  r.models = s.label();
  r.m = s.m;
  r.n = s.n;
  r.k = s.k;
  r.flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  cublasHandle_t h = nullptr;
  try {
    cublas_check(cublasCreate(&h), "cublasCreate");
    cublas_check(cublasSetStream(h, ctx.stream), "cublasSetStream");
    const double set_bytes = 2.0 * static_cast<double>(s.m * s.k + s.n * s.k + s.m * s.n);
    const int sets = rotation_sets(ctx, set_bytes);
    std::vector<Buffer> a, b, d;
    for (int i = 0; i < sets; ++i) {
      a.emplace_back(static_cast<size_t>(s.m * s.k * 2));
      b.emplace_back(static_cast<size_t>(s.n * s.k * 2));
      d.emplace_back(static_cast<size_t>(s.m * s.n * 2));
      fill_bf16(ctx, a.back().get(), s.m * s.k);
      fill_bf16(ctx, b.back().get(), s.n * s.k);
    }
    const float alpha = 1.0f, beta = 0.0f;
    const Timing t = time_op(ctx, sets, [&](int i) {
      cublas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.n), static_cast<int>(s.m),
                                static_cast<int>(s.k), &alpha, b[i].get(), CUDA_R_16BF, static_cast<int>(s.k), a[i].get(),
                                CUDA_R_16BF, static_cast<int>(s.k), &beta, d[i].get(), CUDA_R_16BF,
                                static_cast<int>(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    });
    r.iters = ctx.opt->iters;
    r.reps = t.reps;
    r.sets = sets;
    r.median_us = t.median_us;
    r.min_us = t.min_us;
    r.mean_us = t.mean_us;
    r.tflops = r.flops / (t.median_us * 1e-6) / 1e12;
  } catch (const std::exception& e) {
    r.status = std::string("error: ") + e.what();
    cudaGetLastError();
  }
  if (h) cublasDestroy(h);
  return r;
}
#endif

Row bench_gemm(Context& ctx, const Shape& s, nvfp4_backend_t backend, double baseline_tflops) {
  Row r;
  r.section = "gemm";
  r.op = "nvfp4 gemm (bf16 out)";
  r.backend = nvfp4::backend_name(backend);
  r.shape = std::to_string(s.m) + " x " + std::to_string(s.n) + " x " + std::to_string(s.k);
  r.models = s.label();
  r.m = s.m;
  r.n = s.n;
  r.k = s.k;
  r.flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  try {
    const nvfp4::Device dev = nvfp4::Device::cuda(ctx.device);
    const nvfp4::QuantizedLayout la = nvfp4::rowwise_layout(s.m, s.k), lb = nvfp4::rowwise_layout(s.n, s.k);
    const double set_bytes = static_cast<double>(la.packed_bytes() + lb.packed_bytes() + s.m * s.n * 2);
    const int sets = rotation_sets(ctx, set_bytes);
    std::vector<Buffer> qa, qb, d;
    std::vector<nvfp4::QuantizedView> va, vb;
    {
      // Every set holds the same operands (only their addresses matter for L2), quantized
      // once from one bf16 source: activations 1D, the weight 2D, as in training.
      Buffer src(static_cast<size_t>(std::max(s.m, s.n) * s.k * 2));
      fill_bf16(ctx, src.get(), std::max(s.m, s.n) * s.k);
      for (int i = 0; i < sets; ++i) {
        qa.emplace_back(la.packed_bytes());
        qb.emplace_back(lb.packed_bytes());
        d.emplace_back(static_cast<size_t>(s.m * s.n * 2));
        va.push_back(nvfp4::QuantizedView::carve(la, qa.back().get(), la.packed_bytes(), dev));
        vb.push_back(nvfp4::QuantizedView::carve(lb, qb.back().get(), lb.packed_bytes(), dev));
        nvfp4::quantize(nvfp4::TensorView(src.get(), NVFP4_DTYPE_BFLOAT16, {s.m, s.k}, dev), nvfp4::QuantConfig(),
                        &va.back(), nullptr, ctx.stream);
        nvfp4::quantize(nvfp4::TensorView(src.get(), NVFP4_DTYPE_BFLOAT16, {s.n, s.k}, dev),
                        nvfp4::QuantConfig().block_2d(), &vb.back(), nullptr, ctx.stream);
      }
      check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize");
    }
    std::vector<nvfp4::Gemm> gemms;
    size_t ws_bytes = 0;
    for (int i = 0; i < sets; ++i) {
      const nvfp4::TensorView dv(d[i].get(), NVFP4_DTYPE_BFLOAT16, {s.m, s.n}, dev);
      gemms.push_back(nvfp4::Gemm(va[i], vb[i], dv).backend(backend));
      ws_bytes = std::max(ws_bytes, gemms.back().workspace_bytes());
    }
    Buffer ws(ws_bytes);
    const Timing t = time_op(ctx, sets, [&](int i) { gemms[i].run(ws.get(), ws.size(), ctx.stream); });
    r.iters = ctx.opt->iters;
    r.reps = t.reps;
    r.sets = sets;
    r.median_us = t.median_us;
    r.min_us = t.min_us;
    r.mean_us = t.mean_us;
    r.tflops = r.flops / (t.median_us * 1e-6) / 1e12;
    if (baseline_tflops > 0) {
      r.ratio = r.tflops / baseline_tflops;
      r.ratio_to = "of cuBLAS bf16";
    }
  } catch (const std::exception& e) {
    r.status = std::string("error: ") + e.what();
    cudaGetLastError();
  }
  return r;
}

int run_gpu(const Options& opt) {
  Context ctx;
  ctx.opt = &opt;
  ctx.device = opt.device;
  check(cudaSetDevice(opt.device), "cudaSetDevice");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, opt.device), "cudaGetDeviceProperties");
  ctx.name = prop.name;
  ctx.cc = nvfp4::cuda_device_cc(opt.device);
  ctx.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  check(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "cudaStreamCreate");

  char when[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::printf("nvfp4-bench  nvfp4 %s  build archs \"%s\"  %s\n", nvfp4::version().c_str(), nvfp4_build_cuda_archs(),
              when);
  std::printf("device %d: %s, sm_%d, %d SMs, L2 %.0f MiB, %.0f GiB; %d iters (median), warm-up %d, >= %.0f us/sample\n",
              opt.device, prop.name, ctx.cc, prop.multiProcessorCount, ctx.l2_bytes / 1048576.0,
              prop.totalGlobalMem / 1073741824.0, opt.iters, opt.warmup, opt.min_sample_us);

  std::string arch = std::to_string(ctx.cc) + "a";
  bool built = false;
  for (const std::string& a : nvfp4::build_cuda_archs()) built |= a == arch;
  if (!built)
    std::printf("warning: this library has no code for sm_%d (built for \"%s\"); nvfp4 rows will report errors\n", ctx.cc,
                nvfp4_build_cuda_archs());

  // 4M random bf16 values (8 MB), tiled into every input: timing does not depend on the
  // values beyond their range, and generating gigabytes on the host would dominate.
  ctx.host_bf16.resize(size_t{1} << 22);
  uint64_t st = 0x243f6a8885a308d3ull;
  for (uint16_t& h : ctx.host_bf16) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    const double u1 = (static_cast<double>(st >> 11) + 0.5) / 9007199254740992.0;
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    const double u2 = (static_cast<double>(st >> 11) + 0.5) / 9007199254740992.0;
    h = nvfp4::float_to_bf16(static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2)));
  }

  std::vector<Row> rows;
  rows.push_back(copy_baseline(ctx));
  std::printf("copy baseline: %.0f GB/s (read + write, %s)\n", ctx.copy_gbps, rows.back().shape.c_str());

  if (opt.ops.count("quant")) {
    const QuantVariant variants[] = {
        {"1d rtn rowwise (x)", nvfp4::QuantConfig(), true, false},
        {"1d sr rht-col row+col (x)", nvfp4::QuantConfig().stochastic(1, 0).rht(NVFP4_RHT_COLUMNWISE), true, true},
        {"2d rtn row+col (w)", nvfp4::QuantConfig().block_2d(), true, true},
    };
    // Activations x [M, K] get the 1D variants, weights w [N, K] the 2D one; shapes that
    // repeat across layers and models are timed once.
    std::set<std::tuple<size_t, int64_t, int64_t>> done;
    for (const Shape& s : opt.shapes) {
      for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; ++vi) {
        const QuantVariant& v = variants[vi];
        const bool weight = v.cfg.c().block == NVFP4_BLOCK_2D;
        const int64_t r = weight ? s.n : s.m, c = s.k;
        if (!done.insert(std::make_tuple(vi, r, c)).second) continue;
        rows.push_back(bench_quant(ctx, v, r, c, s.label()));
      }
    }
  }
  if (opt.ops.count("gemm")) {
    for (const Shape& s : opt.shapes) {
      double base = 0;
#if defined(NVFP4_BENCH_CUBLAS)
      if (opt.backends.count("cublas")) {
        rows.push_back(bench_cublas(ctx, s));
        if (rows.back().status == "ok") base = rows.back().tflops;
      }
#endif
      for (nvfp4_backend_t b : {NVFP4_BACKEND_CUTLASS, NVFP4_BACKEND_CUDNN}) {
        if (!opt.backends.count(nvfp4::backend_name(b))) continue;
        if (!nvfp4::backend_supported(b, ctx.cc)) {
          Row r;
          r.section = "gemm";
          r.op = "nvfp4 gemm (bf16 out)";
          r.backend = nvfp4::backend_name(b);
          r.shape = std::to_string(s.m) + " x " + std::to_string(s.n) + " x " + std::to_string(s.k);
          r.m = s.m;
          r.n = s.n;
          r.k = s.k;
          r.models = s.label();
          r.status = "not supported on sm_" + std::to_string(ctx.cc) + " in this build";
          rows.push_back(r);
          continue;
        }
        rows.push_back(bench_gemm(ctx, s, b, base));
      }
      std::fflush(stdout);
    }
  }

  print_rows(rows, "copy");
  print_rows(rows, "quant");
  print_rows(rows, "gemm");
#if !defined(NVFP4_BENCH_CUBLAS)
  if (opt.ops.count("gemm")) std::printf("(no cuBLAS BF16 baseline: this build found no cuBLAS)\n");
#endif
  if (!opt.csv.empty()) write_csv(opt.csv, rows, ctx.name, ctx.cc);
  cudaStreamDestroy(ctx.stream);
  int errors = 0;
  for (const Row& r : rows) errors += r.status.rfind("error", 0) == 0;
  if (errors) std::printf("%d row(s) failed\n", errors);
  return errors ? 1 : 0;
}

}  // namespace
#endif  // NVFP4_BENCH_CUDA

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvfp4-bench: %s\n", e.what());
    return 2;
  }
  if (opt.list) {
    std::printf("%zu GEMM shapes (M x N x K):\n", opt.shapes.size());
    for (const Shape& s : opt.shapes) {
      std::string all;
      for (const std::string& n : s.names) all += (all.empty() ? "" : ", ") + n;
      std::printf("  %6lld x %6lld x %6lld  %s\n", static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), all.c_str());
    }
    return 0;
  }
  const int devices = nvfp4::cuda_device_count();
#if defined(NVFP4_BENCH_CUDA)
  if (devices > opt.device && opt.device >= 0) {
    try {
      return run_gpu(opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nvfp4-bench: %s\n", e.what());
      return 1;
    }
  }
#endif
  std::printf("nvfp4-bench: nothing to time: %s (nvfp4 %s, build archs \"%s\"). %zu shapes parsed; "
              "nvfp4-bench measures GPU kernels only (python -m nvfp4.bench runs the CPU reference).\n",
              devices == 0 ? "no CUDA device visible" : "no such CUDA device", nvfp4::version().c_str(),
              nvfp4_build_cuda_archs(), opt.shapes.size());
  return 0;
}
