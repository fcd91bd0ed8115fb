# CMake package of the torch-fl plugin ABI, shipped inside the torch_fl Python
# package. A plugin finds it with
#   execute_process(COMMAND python -c "import torch_fl; print(torch_fl.cmake_prefix_path())" ...)
#   find_package(TorchFL REQUIRED PATHS <that path>)
# and links the header-only target torch_fl::abi. Plugins never link libtorch.
get_filename_component(_tfl_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(TorchFL_INCLUDE_DIR "${_tfl_prefix}/include")
if(NOT EXISTS "${TorchFL_INCLUDE_DIR}/torch_fl/plugin_api.h")
  set(TorchFL_FOUND FALSE)
  set(TorchFL_NOT_FOUND_MESSAGE "torch_fl/plugin_api.h is missing under ${TorchFL_INCLUDE_DIR}; reinstall torch-fl")
  return()
endif()
file(STRINGS "${TorchFL_INCLUDE_DIR}/torch_fl/types.h" _tfl_major REGEX "^#define TFL_ABI_MAJOR [0-9]+")
file(STRINGS "${TorchFL_INCLUDE_DIR}/torch_fl/types.h" _tfl_minor REGEX "^#define TFL_ABI_MINOR [0-9]+")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" TorchFL_ABI_MAJOR "${_tfl_major}")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" TorchFL_ABI_MINOR "${_tfl_minor}")
set(TorchFL_VERSION "${TorchFL_ABI_MAJOR}.${TorchFL_ABI_MINOR}")
if(NOT TARGET torch_fl::abi)
  add_library(torch_fl::abi INTERFACE IMPORTED)
  set_target_properties(torch_fl::abi PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${TorchFL_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "TFL_BUILDING_PLUGIN")
endif()
set(TorchFL_FOUND TRUE)
