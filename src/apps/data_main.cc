// terngrad-data: dataset converters and the shard inspector (CLI11 subcommands).
//   convert-idx       MNIST / Fashion-MNIST idx(.gz) -> <subset>-NNNNN-of-NNNNN shards (PNG, or --format raw)
//   convert-cifar10   CIFAR-10 binary batches -> train-* and test-* shards (PNG)
//   build-image-data  a folder per class of JPEG/PNG images + labels file -> train-* / validation-* (ImageNet)
//   inspect           count records, check every CRC, list feature keys, label histogram and image sizes
// Converters write plain shards, or gzip/zlib compressed ones with --compression (TF's TFRecordOptions); readers
// detect the compression (inspect --tfrecord_compression forces one). --max_image_pixels bounds every decode.
// Errors end with one line "terngrad-data: error: ..." and exit status 1 (usage errors: 2).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "app_cli.h"
#include "help_format.h"
#include "terngrad/core/error.h"
#include "terngrad/core/logging.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/input_pipeline.h"

namespace {

void print_written(const std::vector<std::string>& paths) {
  for (const auto& p : paths) std::printf("wrote %s\n", p.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"terngrad-data: convert datasets to TFRecord shards of tf.Example and inspect them"};
  app.formatter(std::make_shared<tg::apps::HelpFormat>());  // descriptions wrapped under the names
  app.require_subcommand(1);
  tg::apps::LogLevel log;
  tg::apps::add_flag_table(app, {tg::apps::log_level_flag<tg::apps::LogLevel>()}, log);
  int64_t max_image_pixels = tg::kDefaultMaxImagePixels;
  app.add_option("--max_image_pixels", max_image_pixels, "refuse images with more pixels (from the header)")
      ->capture_default_str();
  std::string compression = "none";
  auto add_compression = [&](CLI::App* c) {
    c->add_option("--compression", compression, "write shards as none | gzip | zlib (TFRecordOptions)")
        ->capture_default_str();
  };

  tg::ConvertIdxOptions idx;
  CLI::App* c_idx = app.add_subcommand("convert-idx", "MNIST/Fashion-MNIST idx(.gz) files -> TFRecord shards");
  c_idx->add_option("--images", idx.images, "idx3 image file (.gz or plain)")->required();
  c_idx->add_option("--labels", idx.labels, "idx1 label file (.gz or plain)")->required();
  c_idx->add_option("--output_dir", idx.output_dir, "output folder (created if missing)")->required();
  c_idx->add_option("--subset", idx.subset, "shard prefix: train or test (default: from the file name)");
  c_idx->add_option("--num_shards", idx.num_shards, "number of shards")->capture_default_str();
  c_idx->add_option("--format", idx.format, "png (as the reference) or raw")->capture_default_str();
  c_idx->add_option("--num_threads", idx.num_threads, "encoding threads")->capture_default_str();
  add_compression(c_idx);

  tg::ConvertCifar10Options cifar;
  CLI::App* c_cifar = app.add_subcommand("convert-cifar10", "CIFAR-10 binary batches -> TFRecord shards");
  c_cifar->add_option("--input_dir", cifar.input_dir, "folder with data_batch_{1..5}.bin and test_batch.bin")
      ->required();
  c_cifar->add_option("--output_dir", cifar.output_dir, "output folder")->required();
  c_cifar->add_option("--train_shards", cifar.train_shards, "train shards")->capture_default_str();
  c_cifar->add_option("--test_shards", cifar.test_shards, "test shards")->capture_default_str();
  c_cifar->add_option("--num_threads", cifar.num_threads, "encoding threads")->capture_default_str();
  add_compression(c_cifar);

  tg::BuildImageDataOptions img;
  CLI::App* c_img =
      app.add_subcommand("build-image-data", "class folders of JPEG/PNG images -> shards, labels.txt, dataset.json");
  c_img->add_option("--input_dir,--train_directory", img.train_directory,
                    "folder with one sub-folder of JPEG/PNG images per class (the training images)");
  c_img->add_option("--validation_directory", img.validation_directory, "folder with one sub-folder per class");
  c_img->add_option("--labels_file", img.labels_file,
                    "one class folder name per line (label = line + 1; 0 stays the background class, so K classes "
                    "train with --num_classes K + 1); default: the input folder's sub-folders, sorted");
  c_img->add_option("--output_dir", img.output_dir, "output folder")->required();
  c_img
      ->add_option("--train_shards", img.train_shards,
                   "train shards (0: one per 256 images, at most the reference's 1024)")
      ->capture_default_str();
  c_img
      ->add_option("--validation_shards", img.validation_shards,
                   "validation shards (0: one per 256 images, at most the reference's 128)")
      ->capture_default_str();
  c_img
      ->add_option("--validation_fraction", img.validation_fraction,
                   "without --validation_directory: this fraction of each class's images (seeded, at least one) "
                   "becomes the validation subset; 0: none")
      ->capture_default_str();
  c_img->add_option("--num_threads", img.num_threads, "threads")->capture_default_str();
  c_img
      ->add_option("--resize", img.resize,
                   "every image becomes RESIZE x RESIZE; -1: images of one size up to 512 keep it, others become "
                   "256x256; 0: each keeps its own size")
      ->capture_default_str();
  c_img->add_option("--channels", img.channels, "1 or 3 channels for every image; 0: 1 when all are grayscale, else 3")
      ->capture_default_str();
  c_img->add_option("--quality", img.quality, "JPEG quality of re-encoded images")->capture_default_str();
  c_img->add_flag("--raw_pixel", img.raw_pixel, "store decoded pixels (image/format RAW)");
  c_img->add_option("--seed", img.seed, "seed of the image order shuffle")->capture_default_str();
  add_compression(c_img);

  std::string data_dir, subset = "train";
  std::vector<std::string> files;
  bool decode = false;
  CLI::App* c_inspect = app.add_subcommand("inspect", "summarise shards and check every CRC");
  c_inspect->add_option("--data_dir", data_dir, "folder of shards (with --subset)");
  c_inspect->add_option("--subset", subset, "shard prefix")->capture_default_str();
  c_inspect->add_option("files", files, "shard files (instead of --data_dir/--subset)");
  c_inspect->add_flag("--decode", decode, "decode every image too");
  std::string read_compression = "auto";
  c_inspect->add_option("--tfrecord_compression", read_compression, "auto | none | gzip | zlib")->capture_default_str();

  if (const int status = tg::apps::parse_command_line(app, argc, argv, "terngrad-data"); status >= 0) return status;
  try {
    tg::setup_logging(log.log_level);
    tg::DecodeOptions dopt = tg::default_decode_options();
    if (max_image_pixels <= 0) TG_THROW("--max_image_pixels {} must be positive", max_image_pixels);
    dopt.max_image_pixels = max_image_pixels;
    tg::set_default_decode_options(dopt);
    if (compression != "none" && compression != "gzip" && compression != "zlib")
      TG_THROW("--compression '{}' is not one of none, gzip, zlib", compression);
    const tg::TfRecordCompression write_c = tg::parse_enum<tg::TfRecordCompression>(compression, "--compression");
    idx.compression = cifar.compression = img.compression = write_c;
    tg::set_default_tfrecord_compression(
        tg::parse_enum<tg::TfRecordCompression>(read_compression, "--tfrecord_compression"));
    if (c_idx->parsed()) {
      print_written(tg::convert_idx(idx));
    } else if (c_cifar->parsed()) {
      print_written(tg::convert_cifar10(cifar));
    } else if (c_img->parsed()) {
      print_written(tg::build_image_data(img));
    } else if (c_inspect->parsed()) {
      if (files.empty()) files = tg::list_data_files(data_dir, subset);
      tg::InspectReport r = tg::inspect_files(files, decode);
      std::fputs(tg::format_report(r).c_str(), stdout);
      if (r.corrupt > 0 || r.undecodable > 0)
        TG_THROW("{} corrupt records and {} undecodable images", r.corrupt, r.undecodable);
    }
  } catch (const std::exception& e) {
    return tg::apps::report_error(e, "terngrad-data");
  }
  return 0;
}
