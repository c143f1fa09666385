"""Einstein radius <-> velocity dispersion through an astropy cosmology (SIS normalisation).

theta_E = 4 pi (sigma_v / c)^2 D_ds / D_s (the singular isothermal sphere), the lenstronomy
``LensCosmo.sis_sigma_v2theta_E`` formula, which is also the lenstronomy SIE theta_E.
Distances are angular-diameter distances from astropy; theta_E in arcsec, sigma_v in km/s.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import InputError

#: Speed of light in km/s.
C_KMS = 299792.458
_ARCSEC_PER_RAD = 180.0 / math.pi * 3600.0
#: Cosmology used when none is named: astropy's Planck 2018 realisation.
DEFAULT_COSMOLOGY = "planck18"


@functools.lru_cache(maxsize=None)
def _named_cosmology(name: str):
    from astropy import cosmology as ac

    key = name.strip().lower()
    if key in ("flat_lcdm_70_0.3", "flatlcdm70", "concordance"):
        return ac.FlatLambdaCDM(H0=70.0, Om0=0.3, Tcmb0=0.0)
    realisations = {n.lower(): n for n in ac.realizations.available}
    if key in realisations:
        return getattr(ac, realisations[key])
    raise InputError(f"unknown cosmology name {name!r}; expected 'flat_lcdm_70_0.3' or one of {sorted(realisations)}")


def get_cosmology(cosmo=DEFAULT_COSMOLOGY):
    """An astropy Cosmology from a name ('planck18', 'wmap9', 'flat_lcdm_70_0.3' = FlatLambdaCDM
    H0=70, Om0=0.3, Tcmb0=0, ...) or an astropy Cosmology instance (returned unchanged)."""
    if isinstance(cosmo, str):
        return _named_cosmology(cosmo)
    if hasattr(cosmo, "angular_diameter_distance"):
        return cosmo
    raise InputError(f"cosmology must be a name or an astropy Cosmology, got {cosmo!r}")


def _lensing_ratio(z_l, z_s, cosmo) -> np.ndarray:
    """D_ds / D_s (dimensionless) for arrays of lens and source redshifts."""
    z_l = np.asarray(z_l, dtype=np.float64)
    z_s = np.asarray(z_s, dtype=np.float64)
    z_l, z_s = np.broadcast_arrays(z_l, z_s)
    bad = ~np.isfinite(z_l) | ~np.isfinite(z_s) | (z_l <= 0) | (z_s <= z_l)
    if np.any(bad):
        i = np.flatnonzero(bad.ravel())[0]
        raise InputError(
            f"need 0 < z_l < z_s, got z_l={z_l.ravel()[i]!r}, z_s={z_s.ravel()[i]!r} ({int(bad.sum())} bad pairs)"
        )
    c = get_cosmology(cosmo)
    zmax = float(z_s.max()) if z_s.size else 0.0
    if getattr(c, "Ok0", None) == 0 and zmax <= _TABLE_ZMAX:
        # Flat: D_ds / D_s = (D_C(z_s) - D_C(z_l)) / D_C(z_s), from a cached table (astropy
        # integrates one quadrature per redshift pair, far too slow for 1e6 tasks).
        z_tab, dc_tab = _comoving_table(c)
        dc_l = np.interp(z_l, z_tab, dc_tab)
        dc_s = np.interp(z_s, z_tab, dc_tab)
        return (dc_s - dc_l) / dc_s
    d_s = c.angular_diameter_distance(z_s).to_value("Mpc")
    d_ds = c.angular_diameter_distance(z_l, z_s).to_value("Mpc")
    return np.asarray(d_ds / d_s, dtype=np.float64)


_TABLE_ZMAX = 10.0


def _comoving_table(c):
    """(z, line-of-sight comoving distance [Mpc]) on a grid fine enough for 1e-8 relative
    accuracy with linear interpolation, cached per cosmology object."""
    key = id(c)
    hit = _TABLES.get(key)
    if hit is None or hit[0] is not c:
        from scipy.integrate import cumulative_simpson

        z = np.linspace(0.0, _TABLE_ZMAX, 100001)
        # inv_efunc is vectorised (astropy's comoving_distance runs one quadrature per redshift).
        dc = c.hubble_distance.to_value("Mpc") * cumulative_simpson(c.inv_efunc(z), x=z, initial=0.0)
        hit = (c, z, dc)
        _TABLES[key] = hit
    return hit[1], hit[2]


_TABLES: dict = {}


def theta_e_from_sigma_v(sigma_v_kms, z_l, z_s, cosmo=DEFAULT_COSMOLOGY) -> np.ndarray:
    """SIS/SIE Einstein radius [arcsec] for velocity dispersion [km/s] and redshifts (vectorised)."""
    s = np.asarray(sigma_v_kms, dtype=np.float64)
    if np.any(~np.isfinite(s) | (s < 0)):
        raise InputError(f"sigma_v must be finite and >= 0 km/s, got {s[~(np.isfinite(s) & (s >= 0))][:4]}")
    return 4.0 * math.pi * (s / C_KMS) ** 2 * _lensing_ratio(z_l, z_s, cosmo) * _ARCSEC_PER_RAD


def sigma_v_from_theta_e(theta_e_arcsec, z_l, z_s, cosmo=DEFAULT_COSMOLOGY) -> np.ndarray:
    """Velocity dispersion [km/s] of the SIS/SIE with Einstein radius [arcsec] (inverse of the above)."""
    t = np.asarray(theta_e_arcsec, dtype=np.float64)
    if np.any(~np.isfinite(t) | (t < 0)):
        raise InputError(f"theta_e must be finite and >= 0 arcsec, got {t[~(np.isfinite(t) & (t >= 0))][:4]}")
    ratio = _lensing_ratio(z_l, z_s, cosmo)
    return C_KMS * np.sqrt(t / _ARCSEC_PER_RAD / (4.0 * math.pi * ratio))


def distance_modulus(z, cosmo=DEFAULT_COSMOLOGY) -> np.ndarray:
    """Distance modulus 5 log10(D_L / 10 pc) [mag] at redshifts ``z`` > 0 (vectorised; flat
    cosmologies through the cached comoving-distance table, D_L = (1 + z) D_C)."""
    z = np.asarray(z, dtype=np.float64)
    if np.any(~np.isfinite(z) | (z <= 0)):
        bad = z[~(np.isfinite(z) & (z > 0))]
        raise InputError(f"distance modulus needs finite z > 0, got {bad[:4].tolist()}")
    c = get_cosmology(cosmo)
    if getattr(c, "Ok0", None) == 0 and (z.max() if z.size else 0.0) <= _TABLE_ZMAX:
        z_tab, dc_tab = _comoving_table(c)
        d_l = (1.0 + z) * np.interp(z, z_tab, dc_tab)
    else:
        d_l = c.luminosity_distance(z).to_value("Mpc")
    return 5.0 * np.log10(np.asarray(d_l) * 1e6 / 10.0)
