# cmake/FindSentencePiece.cmake: Debian's libsentencepiece-dev (no CMake package of its own) as imported targets
# SentencePiece::sentencepiece (encode/decode) and SentencePiece::train (training). Installed beside mptrain's
# package config, which finds it again for consumers of the static library.
find_path(SentencePiece_INCLUDE_DIR sentencepiece_processor.h)
find_library(SentencePiece_LIBRARY sentencepiece)
find_library(SentencePiece_TRAIN_LIBRARY sentencepiece_train)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY SentencePiece_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install libsentencepiece-dev (bash tools/install-deps.sh)")
if(SentencePiece_FOUND AND NOT TARGET SentencePiece::sentencepiece)
  add_library(SentencePiece::sentencepiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::sentencepiece PROPERTIES IMPORTED_LOCATION "${SentencePiece_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}")
  add_library(SentencePiece::train UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::train PROPERTIES IMPORTED_LOCATION "${SentencePiece_TRAIN_LIBRARY}"
                        INTERFACE_LINK_LIBRARIES SentencePiece::sentencepiece)
endif()
mark_as_advanced(SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY)
