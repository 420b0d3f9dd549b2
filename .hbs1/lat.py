import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
print(f"{'benchmark':26s} {'device':10s} {'median ms':>10s} {'us/dispatch':>12s}")
for b in d["benchmarks"]:
    if b.get("status") != "ok":
        print(b["name"], b["device"], b.get("status"), (b.get("error") or "")[:100]); continue
    n = (b.get("metrics") or {}).get("dispatches", 1) or 1
    med = st.median(b["samples"]["device_ms"])
    print(f"{b['name']:26s} {b['device']:10s} {med:10.4f} {1000*med/n:12.2f}")
