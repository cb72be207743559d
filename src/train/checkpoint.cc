// Checkpoint files and the TF-style text index.
#include "terngrad/train/checkpoint.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "checkpoint.pb.h"
#include "terngrad/backend/backend.h"
#include "terngrad/core/atomic_file.h"
#include "terngrad/data/crc32c.h"

namespace tg {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'T', 'G', 'C', 'K', 'P', 'T', 0, 1};
constexpr int64_t kMaxImageSize = 1 << 16;  // sanity bounds of a header's sizes (the model is built from them)
constexpr int64_t kMaxClasses = 1 << 24;

DType parse_dtype(const std::string& s, const std::string& where) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBf16, DType::kI8, DType::kU8, DType::kI32})
    if (s == dtype_name(t)) return t;
  TG_THROW("{}: unknown dtype '{}'", where, s);
}
}  // namespace

const char* CheckpointLayout::prefix(Part part) {
  switch (part) {
    case kParams:
      return "params/";
    case kState:
      return "state/";
    case kEma:
      return "ema/";
    case kSlots:
      return "slots/";
  }
  TG_THROW("unknown checkpoint part {}", static_cast<int>(part));
}

bool CheckpointLayout::is_in(Part part, const std::string& name) { return name.rfind(prefix(part), 0) == 0; }

std::string digest_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

std::string write_checkpoint(const std::string& path, CheckpointMeta meta, const std::vector<NamedTensor>& tensors) {
  terngrad::CheckpointHeader h;
  h.set_format_version(kCheckpointFormatVersion);
  h.set_model(meta.model);
  h.set_dataset(meta.dataset);
  h.set_image_size(meta.image_size);
  h.set_channels(meta.channels);
  h.set_num_classes(meta.num_classes);
  h.set_step(meta.step);
  h.set_data_cursor(meta.data_cursor);
  h.set_rank_files(meta.rank_files);
  h.set_topology(meta.topology);
  for (const auto& [k, v] : meta.flags) (*h.mutable_flags())[k] = v;
  uint64_t offset = 0;
  uint32_t param_crc = 0;
  for (const auto& nt : tensors) {
    TG_CHECK(nt.tensor.device().is_cpu(), "checkpoint tensor {} is not on the host", nt.name);
    auto* e = h.add_tensors();
    e->set_name(nt.name);
    for (int i = 0; i < nt.tensor.shape().rank(); ++i) e->add_shape(nt.tensor.shape()[i]);
    e->set_dtype(dtype_name(nt.tensor.dtype()));
    e->set_offset(offset);
    e->set_bytes(nt.tensor.bytes());
    uint32_t crc = crc32c(nt.tensor.raw(), nt.tensor.bytes());
    e->set_crc32c(crc);
    if (CheckpointLayout::is_in(CheckpointLayout::kParams, nt.name))
      param_crc = crc32c_extend(param_crc, nt.tensor.raw(), nt.tensor.bytes());
    offset = (offset + nt.tensor.bytes() + 63) / 64 * 64;
  }
  meta.parameter_digest = digest_hex(param_crc);
  h.set_parameter_digest(meta.parameter_digest);
  // data_offset depends on the header size, which depends on data_offset: fix it at a 64-byte boundary
  // computed with the field present (a fixed64-sized varint upper bound).
  h.set_data_offset(UINT64_MAX >> 1);
  const size_t upper = 16 + h.ByteSizeLong() + 4;
  const uint64_t data_offset = (upper + 63) / 64 * 64;
  h.set_data_offset(data_offset);
  std::string header;
  {  // deterministic: the flags map is written in key order, so equal checkpoints are equal bytes
    google::protobuf::io::StringOutputStream raw(&header);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    TG_CHECK(h.SerializeToCodedStream(&coded), "{}: cannot serialize the checkpoint header", path);
  }
  TG_CHECK(16 + header.size() + 4 <= data_offset, "checkpoint header layout error");

  AtomicFile f(path);
  f.write(kMagic, 8);
  uint64_t len = header.size();
  f.write(&len, 8);
  f.write(header);
  uint32_t hcrc = crc32c(header.data(), header.size());
  f.write(&hcrc, 4);
  static const char zeros[64] = {};
  while (f.bytes_written() < data_offset)
    f.write(zeros, std::min<uint64_t>(sizeof zeros, data_offset - f.bytes_written()));
  for (const auto& nt : tensors) {
    f.write(nt.tensor.raw(), nt.tensor.bytes());
    size_t pad = (64 - nt.tensor.bytes() % 64) % 64;
    f.write(zeros, pad);
  }
  f.commit();
  return meta.parameter_digest;
}

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.good(), "cannot open checkpoint {}", path);
  char magic[8];
  uint64_t len = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&len), 8);
  TG_CHECK(in.good() && std::memcmp(magic, kMagic, 8) == 0, "{} is not a terngrad checkpoint (bad magic)", path);
  const uint64_t file_size = fs::file_size(path);
  TG_CHECK(len < file_size, "{}: header length {} exceeds the file size {}", path, len, file_size);
  std::string header(len, '\0');
  uint32_t hcrc = 0;
  in.read(header.data(), static_cast<std::streamsize>(len));
  in.read(reinterpret_cast<char*>(&hcrc), 4);
  TG_CHECK(in.good(), "{}: truncated header", path);
  TG_CHECK(crc32c(header.data(), header.size()) == hcrc, "{}: header checksum mismatch (corrupt file)", path);
  terngrad::CheckpointHeader h;
  TG_CHECK(h.ParseFromString(header), "{}: header does not parse", path);
  TG_CHECK(h.format_version() == kCheckpointFormatVersion, "{}: format version {} (this build reads {})", path,
           h.format_version(), kCheckpointFormatVersion);
  meta_.model = h.model();
  meta_.dataset = h.dataset();
  meta_.image_size = h.image_size();
  meta_.channels = h.channels();
  meta_.num_classes = h.num_classes();
  meta_.step = h.step();
  meta_.data_cursor = h.data_cursor();
  meta_.rank_files = h.rank_files();
  meta_.topology = h.topology();
  meta_.parameter_digest = h.parameter_digest();
  for (const auto& [k, v] : h.flags()) meta_.flags[k] = v;
  // Every size the header declares is checked against the file before anything is allocated from it.
  TG_CHECK(meta_.image_size >= 1 && meta_.image_size <= kMaxImageSize && (meta_.channels == 1 || meta_.channels == 3) &&
               meta_.num_classes >= 1 && meta_.num_classes <= kMaxClasses && meta_.step >= 0,
           "{}: header declares image size {}, {} channels, {} classes, step {} (corrupt header)", path,
           meta_.image_size, meta_.channels, meta_.num_classes, meta_.step);
  data_offset_ = h.data_offset();
  TG_CHECK(data_offset_ >= 16 + len + 4 && data_offset_ <= file_size,
           "{}: data offset {} outside the file of {} bytes (corrupt header)", path, data_offset_, file_size);
  for (const auto& e : h.tensors()) {
    TG_CHECK(e.shape_size() <= Shape::kMaxRank, "{}: tensor {} has rank {} (at most {}; corrupt header)", path,
             e.name(), e.shape_size(), Shape::kMaxRank);
    for (int64_t d : e.shape())
      TG_CHECK(d >= 0 && static_cast<uint64_t>(d) <= file_size, "{}: tensor {} has dimension {} (corrupt header)", path,
               e.name(), d);
    std::vector<int64_t> dims(e.shape().begin(), e.shape().end());
    Shape shape(dims);
    int64_t numel = 0;
    try {
      numel = shape.numel();
    } catch (const Error& err) {
      TG_THROW("{}: tensor {}: {} (corrupt header)", path, e.name(), err.what());
    }
    Entry entry{shape, parse_dtype(e.dtype(), path), e.offset(), e.bytes(), e.crc32c()};
    TG_CHECK(static_cast<uint64_t>(numel) <= file_size &&
                 entry.bytes == static_cast<uint64_t>(numel) * dtype_size(entry.dtype),
             "{}: tensor {} declares {} bytes for {}{} (corrupt header)", path, e.name(), entry.bytes,
             dtype_name(entry.dtype), entry.shape.str());
    TG_CHECK(
        entry.offset <= file_size && entry.bytes <= file_size && data_offset_ + entry.offset + entry.bytes <= file_size,
        "{}: tensor {} lies beyond the end of the file", path, e.name());
    table_[e.name()] = entry;
  }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> n;
  for (const auto& [k, v] : table_) n.push_back(k);
  return n;
}

Shape CheckpointReader::shape(const std::string& name) const {
  auto it = table_.find(name);
  TG_CHECK(it != table_.end(), "{} has no tensor '{}'", path_, name);
  return it->second.shape;
}

void CheckpointReader::read(const std::string& name, const Tensor& dst) const {
  auto it = table_.find(name);
  TG_CHECK(it != table_.end(), "{} has no tensor '{}'", path_, name);
  const Entry& e = it->second;
  TG_CHECK(dst.device().is_cpu(), "checkpoint read into a {} tensor", dst.device().str());
  TG_CHECK(e.shape == dst.shape() && e.dtype == dst.dtype(), "{}: tensor '{}' is {}{}, the model expects {}{}", path_,
           name, dtype_name(e.dtype), e.shape.str(), dtype_name(dst.dtype()), dst.shape().str());
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_offset_ + e.offset));
  in.read(static_cast<char*>(dst.raw()), static_cast<std::streamsize>(e.bytes));
  TG_CHECK(in.good(), "{}: truncated data of tensor '{}'", path_, name);
  TG_CHECK(crc32c(dst.raw(), e.bytes) == e.crc, "{}: checksum mismatch in tensor '{}' (corrupt file)", path_, name);
}

void read_slab(const CheckpointReader& reader, Backend& backend, const Slab& slab,
               const std::function<std::string(const std::string&)>& name_of) {
  size_t largest = 0;
  for (const auto& e : slab.entries())
    largest = std::max(largest, static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype));
  Buffer host(host_allocator(), largest);
  for (int i = 0; i < slab.size(); ++i) {
    const auto& e = slab.entry(i);
    Tensor h(host.data(), e.shape, e.dtype, Device::cpu());
    reader.read(name_of(e.name), h);
    backend.copy(slab.view(i), h);
  }
}

std::string checkpoint_path(const std::string& train_dir, int64_t step) {
  return (fs::path(train_dir) / fmt::format("model.ckpt-{}", step)).string();
}

void write_checkpoint_index(const std::string& train_dir, const std::vector<int64_t>& kept_steps) {
  TG_CHECK(!kept_steps.empty(), "checkpoint index with no checkpoints");
  std::string text = fmt::format("model_checkpoint_path: \"model.ckpt-{}\"\n", kept_steps.back());
  for (int64_t s : kept_steps) text += fmt::format("all_model_checkpoint_paths: \"model.ckpt-{}\"\n", s);
  AtomicFile f((fs::path(train_dir) / "checkpoint").string());
  f.write(text);
  f.commit();
}

std::optional<std::string> latest_checkpoint(const std::string& train_dir) {
  std::ifstream in((fs::path(train_dir) / "checkpoint").string());
  if (!in.good()) return std::nullopt;
  std::string line;
  static const std::regex re("^model_checkpoint_path:\\s*\"([^\"]+)\"");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) {
      fs::path p(m[1].str());
      return (p.is_absolute() ? p : fs::path(train_dir) / p).string();
    }
  }
  return std::nullopt;
}

std::string checkpoint_rank_path(const std::string& train_dir, int64_t step, int rank) {
  return fmt::format("{}.rank-{}", checkpoint_path(train_dir, step), rank);
}

std::vector<std::string> orphan_rank_files(const std::string& train_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(train_dir, ec)) return out;
  static const std::regex re("^model\\.ckpt-([0-9]+)\\.rank-[0-9]+$");
  for (fs::directory_iterator it(train_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, m, re) && !fs::exists(checkpoint_path(train_dir, std::stoll(m[1].str()))))
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> list_checkpoint_steps(const std::string& train_dir) {
  std::vector<int64_t> steps;
  if (!fs::is_directory(train_dir)) return steps;
  static const std::regex re("^model\\.ckpt-([0-9]+)$");
  for (const auto& entry : fs::directory_iterator(train_dir)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, re)) steps.push_back(std::stoll(m[1].str()));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace tg
