# Static SASS of the tile loops: each backward branch whose body holds (Q/H)GMMA, with its
# instruction, FFMA, FADD and LDS counts. Usage: cuobjdump -sass K.cubin > K.sass; python3
# dev/sass_loops.py K.sass (cuobjdump: e.g. triton/backends/nvidia/bin in a venv with triton).
import re,sys
lines=open(sys.argv[1]).read().splitlines()
ins=[]
for l in lines:
    m=re.match(r'\s+/\*([0-9a-f]+)\*/\s+(.*?);',l)
    if m: ins.append((int(m.group(1),16),m.group(2).strip()))
addr={a:i for i,(a,_) in enumerate(ins)}
# backward branches
for i,(a,t) in enumerate(ins):
    m=re.search(r'BRA (?:`\()?\.?L?_?x?(0x[0-9a-f]+)',t) or re.search(r'BRA (0x[0-9a-f]+)',t)
    if m:
        tgt=int(m.group(1),16)
        if tgt<a and tgt in addr:
            body=ins[addr[tgt]:i+1]
            q=sum(1 for _,x in body if 'GMMA' in x)
            if q:
                ffma=sum(1 for _,x in body if x.split()[0].lstrip('@!P0123456789 ').startswith('FFMA') or ' FFMA' in x)
                fadd=sum(1 for _,x in body if 'FADD' in x)
                lds=sum(1 for _,x in body if 'LDS' in x)
                print(f"loop {tgt:#x}-{a:#x}: {len(body)} instrs, {q} GMMA, FFMA {ffma}, FADD {fadd}, LDS {lds}")
