source .gpum/setup.sh
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .hbwg/gl/*.whl && mkdir -p /tmp/site/cmeel.prefix/lib && cp .gpum/spv/lib/*.so /tmp/site/cmeel.prefix/lib/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 python3 -m halbench run-suite device-peaks --only 'peak/latency/*' -o $OUT/lat.json > $OUT/lat.log 2>&1; echo "suite rc=$?"; tail -3 $OUT/lat.log
python3 .hbs1/lat.py $OUT/lat.json
OUT=$OUT/tune URIS=cuda://0 PROBLEMS="scripts/tune_problems/mobilenetv2-b1.json scripts/tune_problems/mobilenetv2-b8.json" bash scripts/gpu_tune.sh 150 | tail -60
