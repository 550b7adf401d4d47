import gzip, sys, collections, re
rows=[]
for line in gzip.open(sys.argv[1],'rt'):
    f=line.split()
    if len(f)<9: continue
    rows.append((int(f[0]),int(f[1]),int(f[2]),f[8]))
rows.sort()
def cls(n):
    for k,c in [('embed','embed'),('rmsnorm','rmsnorm'),('qkv_rope','qkv_rope'),('mt_combine','attn_comb'),('attn','attn'),('mt_','attn'),('gemm_ref_tma','gemm_ref'),('gemm_ref','gemm_ref'),('nvjet','cublas'),('skinny','skinny'),('silu','silu'),('sample','sample'),('flush','flush'),('l2','flush')]:
        if k in n: return c
    return n[:30]
# passes: from an embed kernel to the last kernel before the next embed
passes=[]; cur=None
for r in rows:
    if r[2]!=0: continue
    c=cls(r[3])
    if c=='embed':
        if cur: passes.append(cur)
        cur=[]
    if cur is not None: cur.append((r[0],r[1],c,r[3]))
if cur: passes.append(cur)
print(len(passes),'eager passes')
for i,p in enumerate(passes):
    wall=(p[-1][1]-p[0][0])/1e6
    busy=0; idle=collections.Counter(); kt=collections.Counter(); frontier=p[0][0]; n=collections.Counter()
    for s,e,c,nm in p:
        if s>frontier: idle[c]+=s-frontier
        kt[c]+=e-s; n[c]+=1
        frontier=max(frontier,e)
    tot_idle=sum(idle.values())/1e6
    ng=n['gemm_ref']+n['cublas']+n['skinny']
    kind='REF' if n['gemm_ref'] else 'FAST'
    print(f"{i:3d} {kind:4s} kernels {len(p):4d} wall {wall:8.3f} idle {tot_idle:6.3f} ms | "+' '.join(f"{c}:{idle[c]/1e6:.3f}/{n[c]}" for c in sorted(idle, key=lambda c:-idle[c])[:6]))

def kt(p):
    k=collections.Counter()
    for s,e,c,nm in p: k[c]+=(e-s)/1e6
    return k
import statistics
groups={'2288 FAST':range(1,8),'2288 REF':range(12,19),'2048 FAST':range(23,30),'2048 REF':range(34,41),'chunk FAST':range(44,52),'chunk REF':range(55,63),'alone FAST':range(67,74),'alone REF':range(78,85)}
allc=set()
res={}
for g,rg in groups.items():
    ks=[kt(passes[i]) for i in rg]
    walls=[(passes[i][-1][1]-passes[i][0][0])/1e6 for i in rg]
    cs=set().union(*ks); allc|=cs
    res[g]=({c:statistics.median([k[c] for k in ks]) for c in cs}, statistics.median(walls), [round(w,1) for w in walls])
for g,(m,w,ws) in res.items():
    print(f"{g:11s} wall med {w:7.2f} {ws}  "+' '.join(f"{c}:{m[c]:.2f}" for c in sorted(m,key=lambda c:-m[c])))

print()
def pos_times(rg):
    acc=collections.defaultdict(list)
    for i in rg:
        p=passes[i]
        body=p[1:257]
        per=collections.Counter()
        for j,(s,e,c,nm) in enumerate(body):
            per[j%8]+=(e-s)/1e6
        for j in range(8): acc[j].append(per[j])
        acc['tail'].append(sum((e-s)/1e6 for s,e,c,nm in p[257:]))
    names={}
    for j,(s,e,c,nm) in enumerate(passes[rg[0]][1:9]): names[j]=(c,nm[:40])
    return {k:statistics.median(v) for k,v in acc.items()}, names
for pair in [('2048 FAST','2048 REF'),('chunk FAST','chunk REF'),('2288 FAST','2288 REF')]:
    a,na=pos_times(groups[pair[0]]); b,nb=pos_times(groups[pair[1]])
    print(pair)
    for j in list(range(8))+['tail']:
        print(f"  {j!s:5s} {a[j]:7.3f} {b[j]:7.3f} {b[j]-a[j]:+7.3f}  {na.get(j,('',''))[1]:40s} {nb.get(j,('',''))[1]}")

print()
for g in ['2048 FAST','2048 REF','chunk FAST','chunk REF','2288 FAST','2288 REF']:
    p=passes[groups[g][0]]
    for j in (1,4,6,7):
        s,e,c,nm=p[1+8*5+j]
        print(g,j,nm[:90])

print()
for g in ['2048 FAST','2048 REF']:
    for i in list(groups[g])[:3]:
        p=passes[i]
        d=[(p[1+8*l+6][1]-p[1+8*l+6][0])/1e3 for l in range(32)]
        a=[(p[1+8*l+3][1]-p[1+8*l+3][0])/1e3 for l in range(32)]
        print(g,i,'gu us:',' '.join(f"{x:.0f}" for x in d[::3]),' attn:',' '.join(f"{x:.0f}" for x in a[::6]))
