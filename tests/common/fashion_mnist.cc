// idx(.gz) reading for the Fashion-MNIST accuracy tests (zlib's gz reader also reads plain files).
#include "common/fashion_mnist.h"

#include <zlib.h>

#include <cstdlib>
#include <filesystem>

#include "terngrad/core/error.h"

namespace tg::testing {

namespace {
std::vector<uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  TG_CHECK(f != nullptr, "cannot open {}", path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(f);
  TG_CHECK(n == 0, "{}: read error", path);
  return out;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t off) {
  return (uint32_t(b[off]) << 24) | (uint32_t(b[off + 1]) << 16) | (uint32_t(b[off + 2]) << 8) | b[off + 3];
}
}  // namespace

std::string fashion_mnist_dir() {
  const char* dir = "/usr/share/datasets/fashion-mnist";
  if (std::filesystem::exists(std::string(dir) + "/t10k-labels-idx1-ubyte.gz")) return dir;
  // In CI a missing dataset is a broken setup, not a reason to skip every end-to-end test.
  const char* ci = std::getenv("CI");
  TG_CHECK(!(ci && std::string(ci) == "true"),
           "CI=true but Fashion-MNIST is missing from {} (scripts/setup.sh installs dataset-fashion-mnist): the "
           "end-to-end tests would all skip",
           dir);
  return "";
}

IdxDataset load_fashion_mnist(const std::string& subset) {
  const std::string dir = fashion_mnist_dir();
  TG_CHECK(!dir.empty(), "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)");
  const std::string ipath = dir + "/" + subset + "-images-idx3-ubyte.gz";
  const std::string lpath = dir + "/" + subset + "-labels-idx1-ubyte.gz";
  std::vector<uint8_t> img = read_gz(ipath), lab = read_gz(lpath);
  TG_CHECK(img.size() >= 16 && be32(img, 0) == 0x803, "{}: not an idx3 image file", ipath);
  TG_CHECK(lab.size() >= 8 && be32(lab, 0) == 0x801, "{}: not an idx1 label file", lpath);
  IdxDataset d;
  d.count = be32(img, 4);
  d.rows = be32(img, 8);
  d.cols = be32(img, 12);
  TG_CHECK(be32(lab, 4) == d.count, "{} and {} disagree on the count", ipath, lpath);
  TG_CHECK(img.size() == 16 + size_t(d.count * d.rows * d.cols) && lab.size() == 8 + size_t(d.count), "{}: truncated",
           ipath);
  d.images.resize(img.size() - 16);
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = (img[16 + i] / 255.f - 0.5f) * 2.f;
  d.labels.assign(lab.begin() + 8, lab.end());
  return d;
}

}  // namespace tg::testing
